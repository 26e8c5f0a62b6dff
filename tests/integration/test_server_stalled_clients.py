"""Clients that never finish: the bundled server drops them and keeps serving everyone else.

Raw sockets on loopback against the real server: a connection opened and never
used, a request head cut off halfway (on a new and on a kept-alive connection),
a body that stops coming.  Each must lose its socket once its read deadline has
passed (``--client-header-timeout``, ``--client-body-timeout``; nginx's, 60 s
by default, a second here) — not before, and not never (uvicorn alone kept them
for ever) — while ordinary requests are answered meanwhile; a body still coming,
however slowly, is not a stall.  The bounds are the deadline itself (never
early) and the deadline plus the time a normal request took on this machine
(nothing stalled behind it).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.fixtures.server_proc import ServerProcess

TIMEOUT_S = 1.0
BODY = json.dumps(
    {"model": "llmload-synthetic", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
).encode()


def _head(n: int, host: str = "x") -> bytes:
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {n}\r\n\r\n"
    ).encode()


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(60 * TIMEOUT_S)
    return sock


def _until_closed(sock: socket.socket) -> tuple[float, bytes]:
    """Read until the server closes; (when, what it sent)."""
    got = b""
    while data := sock.recv(65536):
        got += data
    return time.monotonic(), got


def _normal(url: str) -> float:
    """One ordinary request, answered in full; how long it took."""
    t = time.monotonic()
    r = httpx.post(f"{url}/v1/chat/completions", content=BODY, timeout=30)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"], r.text
    return time.monotonic() - t


def test_stalled_clients_lose_their_sockets_and_others_are_served(
    start_server: Callable[..., Any],
) -> None:
    server = start_server(
        ttft_ms=1, itl_ms=1, client_header_timeout=TIMEOUT_S, client_body_timeout=TIMEOUT_S
    )
    slack = _normal(server.url)  # this machine's time for a whole request right now
    opened = time.monotonic()
    idle = [_connect(server.url) for _ in range(50)]  # opened, never used
    half_head = _connect(server.url)
    half_head.sendall(_head(len(BODY))[:40])
    half_body = _connect(server.url)
    half_body.sendall(_head(len(BODY)) + BODY[:10])
    kept = _connect(server.url)  # one whole request, then half of the next head
    kept.sendall(_head(len(BODY)) + BODY)
    first = kept.recv(65536)
    assert first.startswith(b"HTTP/1.1 200"), first
    # everyone else is served while they stall
    for _ in range(5):
        slack = max(slack, _normal(server.url))
    time.sleep(TIMEOUT_S / 2)
    kept_began = time.monotonic()
    kept.sendall(_head(len(BODY))[:30])

    for sock in idle:
        closed, got = _until_closed(sock)
        assert got == b""  # sent nothing: nothing to answer
        assert opened + TIMEOUT_S <= closed + 0.01 < opened + TIMEOUT_S + slack + 1.0
    for sock, code in ((half_head, b"client_header_timeout"), (half_body, b"client_body_timeout")):
        closed, got = _until_closed(sock)
        assert got.startswith(b"HTTP/1.1 408"), got
        assert json.loads(got.partition(b"\r\n\r\n")[2])["error"]["code"] == code.decode()
        assert opened + TIMEOUT_S <= closed + 0.01
    closed, got = _until_closed(kept)
    assert got.startswith(b"HTTP/1.1 408"), got  # its head's clock began at its first byte
    assert kept_began + TIMEOUT_S <= closed + 0.01
    # only the body that stopped reached the app: counted once, as client_timeout (408)
    assert server.metric("llmserve_requests_total", **_labels("client_timeout")) == 1
    assert server.metric("llmserve_requests_total", **_labels("ok")) == 7
    _normal(server.url)  # and the server goes on


def _labels(status: str) -> dict[str, str]:
    return {"endpoint": "/v1/chat/completions", "stream": "false", "status": status}


def test_a_slow_body_that_keeps_coming_is_not_a_stall(start_server: Callable[..., Any]) -> None:
    """The body deadline is between two reads (nginx's), not for the whole body."""
    server = start_server(ttft_ms=1, itl_ms=1, client_body_timeout=TIMEOUT_S)
    sock = _connect(server.url)
    sock.sendall(_head(len(BODY)))
    began = time.monotonic()
    for i in range(0, len(BODY), len(BODY) // 4 + 1):
        time.sleep(TIMEOUT_S / 2)
        sock.sendall(BODY[i : i + len(BODY) // 4 + 1])
    got = sock.recv(65536)
    assert time.monotonic() - began > TIMEOUT_S  # longer than the deadline in all
    assert got.startswith(b"HTTP/1.1 200"), got
    sock.close()


def test_the_flags_reach_the_server_process(
    start_server_proc: Callable[..., ServerProcess],
) -> None:
    proc = start_server_proc(
        "--client-header-timeout", str(TIMEOUT_S), "--client-body-timeout", "0"
    )
    opened = time.monotonic()
    idle = _connect(proc.url)
    body = _connect(proc.url)
    body.sendall(_head(len(BODY)) + BODY[:10])  # 0: this deadline is off
    closed, got = _until_closed(idle)
    assert got == b"" and closed - opened >= TIMEOUT_S - 0.01
    body.settimeout(2 * TIMEOUT_S)
    with pytest.raises(TimeoutError):  # still open after twice the other deadline
        body.recv(1)
    body.close()
