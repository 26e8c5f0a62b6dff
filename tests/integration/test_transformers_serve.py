"""llmload against the real ``transformers serve`` (transformers 5.x), on the embedded checkpoint.

``transformers serve`` ends a stream after its finish chunk (``finish_reason`` +
``usage``) with a clean end of the chunked body and no ``data: [DONE]``; its
first chunk is a role-only delta.  These streams are complete answers: the
record is ``ok`` with ``stream_end == "eof"``, and the report says "server
sends no [DONE]" once per phase.  The server runs out of process on an
ephemeral loopback port (its CLI needs ``accelerate`` to place the model).
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmload.target_server.launch import ServerProcess, wait_healthy
from tests.fixtures.drive import drive, loadtest

MAX_TOKENS = 8
#: transformers serve answers 422 to fields it does not know, such as vLLM's ignore_eos
PLAIN = {"ignore_eos": None}


def _missing() -> str | None:
    for module, why in (
        ("transformers.cli.serve", "the `transformers serve` CLI (transformers 5.x)"),
        ("accelerate", "accelerate (transformers serve places models with a device_map)"),
    ):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"{why} is not installed"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def tserve(embedded_model: Path) -> Iterator[tuple[str, str]]:
    """``transformers serve <embedded model dir>``: (base URL, model id)."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    port = _free_port()
    code = "import sys; from transformers.cli.transformers import main; sys.exit(main())"
    cmd = [
        sys.executable,
        "-c",
        code,
        "serve",
        str(embedded_model),
        "--device",
        "cpu",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=embedded_model
    )
    server = ServerProcess(f"http://127.0.0.1:{port}", proc)
    try:
        wait_healthy(server.url, 180.0, alive=lambda: proc.poll() is None)
    except BaseException:
        server.stop(timeout=5.0)
        err = proc.stderr.read()[-2000:] if proc.stderr else ""
        raise RuntimeError(f"transformers serve did not start:\n{err}") from None
    try:
        yield server.url, str(embedded_model)
    finally:
        server.stop()


def test_stream_without_done_is_ok_and_says_how_it_ended(tserve: tuple[str, str]) -> None:
    url, model = tserve
    rec, text = drive(url, "openai-chat", model=model, max_tokens=MAX_TOKENS, options=PLAIN)
    assert rec.status == "ok", rec.error
    assert rec.stream_end == "eof"  # no data: [DONE]
    assert rec.finish_reason in ("length", "stop")
    assert rec.token_source == "usage" and rec.usage_output_tokens is not None
    assert 1 <= rec.output_tokens <= MAX_TOKENS and rec.prompt_tokens
    assert text  # the role-only first chunk did not count as content
    assert rec.ttft_s is not None and rec.e2e_s is not None and rec.ttft_s <= rec.e2e_s


def test_sync_mode(tserve: tuple[str, str]) -> None:
    url, model = tserve
    rec, text = drive(
        url, "openai-chat", model=model, mode="sync", max_tokens=MAX_TOKENS, options=PLAIN
    )
    assert rec.status == "ok", rec.error
    assert rec.stream_end is None and text
    assert rec.token_source == "usage" and 1 <= (rec.output_tokens or 0) <= MAX_TOKENS


def test_a_run_in_both_modes_is_all_ok_and_names_the_missing_done(
    tserve: tuple[str, str], tmp_path: Path
) -> None:
    url, model = tserve
    summary = loadtest(
        tmp_path / "run",
        "--target",
        url,
        "--model",
        model,
        "--modes",
        "sync,stream",
        "--users",
        "2",
        "--pacing",
        "0s",
        "--duration",
        "2s",
        "--max-tokens",
        str(MAX_TOKENS),
        "--scenario",
        "short_qa",
        "--seed",
        "1",
        timeout=180.0,
    )
    phases = summary["phases"]
    for name in ("sync", "stream"):
        assert phases[name]["count"] > 0 and phases[name]["errors"] == {}, phases[name]
    codes = [d["code"] for d in phases["stream"]["diagnostics"]]
    assert codes.count("no_done_marker") == 1, codes
    assert "no_done_marker" not in [d["code"] for d in phases["sync"]["diagnostics"]]
