"""What listens where, and who may call it: loopback by default, an explicit host to go wider,
the API key checked in constant time.  Real server processes; the sockets are read from the OS.
"""

from __future__ import annotations

import ast
import hmac
import inspect
import socket
import subprocess
from collections.abc import Callable
from typing import Any

import httpx
import psutil
import pytest

from llmload.loadtests.options import RunOptions
from llmload.target_server import app as server_app
from llmload.target_server.launch import launch, wait_healthy
from llmload.target_server.settings import Settings
from tests.fixtures.server_proc import ROOT

KEY = "sk-exposure-test-4b1d9e0c"
CHAT = "/v1/chat/completions"
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def listen(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """``python -m llmload.target_server --port 0 ARGS``, no --host given; ``(process, url)``."""
    server = launch(
        ["--port", "0", "--log-level", "warning", *args],
        env={"LLMLOAD_HOST": None, **(env or {})},
        cwd=ROOT,
        ready_timeout=60,
        loopback=False,
        health=False,
    )
    return server.proc, server.url


def listening_addresses(pid: int) -> set[str]:
    """The local addresses the process has listening TCP sockets on."""
    conns = psutil.Process(pid).net_connections(kind="inet")
    return {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN}


def outside_address() -> str | None:
    """An IPv4 address of this machine that is not loopback (None on a loopback-only box)."""
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return str(a.address)
    return None


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def test_loopback_unless_a_host_is_given() -> None:
    assert Settings().host == "127.0.0.1"
    options = RunOptions()
    assert (
        options.output.metrics_host
        == options.output.web_host
        == options.distributed.master_host
        == "127.0.0.1"
    )
    outside = outside_address()
    proc, url = listen()
    try:
        port = int(url.rsplit(":", 1)[1])
        assert url.startswith("http://127.0.0.1:")
        assert listening_addresses(proc.pid) == {"127.0.0.1"}
        if outside is not None:
            assert not reachable(outside, port)
    finally:
        proc.terminate()
        proc.wait(10)
    for args, env in ((("--host", "0.0.0.0"), None), ((), {"LLMLOAD_HOST": "0.0.0.0"})):
        proc, url = listen(*args, env=env)
        try:
            port = int(url.rsplit(":", 1)[1])
            assert listening_addresses(proc.pid) == {"0.0.0.0"}
            if outside is not None:
                wait_healthy(f"http://{outside}:{port}", 30)
        finally:
            proc.terminate()
            proc.wait(10)


def test_api_key_compare_is_constant_time_in_the_source() -> None:
    tree = ast.parse(inspect.getsource(server_app._check_key))
    calls = [ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert "hmac.compare_digest" in calls
    # no ordinary comparison ever touches the key or the given credential
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and not all(
            isinstance(op, ast.Is | ast.IsNot) for op in node.ops
        ):
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            assert not names & {"key", "given", "auth"}, ast.unparse(node)


def test_every_wrong_key_is_a_401_through_compare_digest(
    start_server: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    server = start_server(api_key=KEY, ttft_ms=0, itl_ms=0)
    wrong = [
        None,
        "",
        KEY,
        f"Bearer {KEY[:-1]}",
        f"Bearer {KEY}x",
        f"Bearer {KEY[:-1]}X",
        f"Basic {KEY}",
        f"Bearer  {KEY.upper()}",
        "Bearer",
        f"Token {KEY}",
    ]
    with httpx.Client(base_url=server.url, timeout=10) as http:
        for value in wrong:
            headers = {} if value is None else {"Authorization": value}
            for method, path in (("POST", CHAT), ("GET", "/v1/models")):
                r = http.request(method, path, json=BODY, headers=headers)
                assert r.status_code == 401, (value, path, r.text)
                err = r.json()["error"]
                assert set(err) == {"message", "type", "param", "code"}
                assert err["code"] == "invalid_api_key" and KEY[4:] not in r.text
        ok = http.post(CHAT, json=BODY, headers={"Authorization": f"bearer {KEY}"})
        assert ok.status_code == 200, ok.text
        assert http.get("/health").status_code == 200  # liveness stays open for probes
    # every credential that carried a Bearer value was judged by compare_digest, none by ==
    bearer = [v for v in wrong if v and v.lower().startswith("bearer ")]
    assert len(compared) >= 2 * len(bearer) + 1
    assert all(b == KEY.encode() for _a, b in compared)
    assert server.metric(
        "llmserve_requests_total", endpoint=CHAT, stream="false", status="unauthorized"
    ) == len(wrong)
