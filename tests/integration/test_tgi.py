"""The TGI adapter against a loopback stand-in that speaks TGI's wire format.

No text-generation-inference server can be installed here (it needs its Rust
router and a GPU), so this FastAPI app reproduces TGI 2.x/3.x's ``/generate``
and ``/generate_stream`` as documented in its OpenAPI spec: ``data:{...}``
events with ``token``/``generated_text``/``details``, a special end-of-sequence
token last, 422 ``{"error", "error_type"}`` for invalid input, and an
``{"error"}`` event for a failure mid-stream.  The known delays make the
measurements checkable.
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from tests.fixtures.drive import drive, loadtest

FIRST_S, TOKEN_S, LIMIT = 0.08, 0.015, 64
WORDS = [f" w{i}" for i in range(LIMIT)]


def _tgi_app() -> FastAPI:
    app = FastAPI()

    def _invalid(params: dict[str, Any]) -> JSONResponse | None:
        n = int(params.get("max_new_tokens") or 20)
        if not 0 < n <= LIMIT:
            msg = f"Input validation error: `max_new_tokens` must be <= {LIMIT}. Given: {n}"
            return JSONResponse({"error": msg, "error_type": "validation"}, status_code=422)
        return None

    @app.post("/generate_stream")
    async def generate_stream(request: Request) -> Any:
        body = await request.json()
        params = body.get("parameters") or {}
        if (bad := _invalid(params)) is not None:
            return bad
        n = int(params.get("max_new_tokens") or 20)
        fail = "fail" in body["inputs"]

        async def events() -> AsyncIterator[bytes]:
            await asyncio.sleep(FIRST_S)
            for i in range(n):
                if i:
                    await asyncio.sleep(TOKEN_S)
                if fail and i == 2:
                    err = {"error": "Request failed during generation", "error_type": "generation"}
                    yield f"data:{json.dumps(err)}\n\n".encode()
                    return
                last = i == n - 1
                token = {"id": 10 + i, "text": WORDS[i], "logprob": -0.5, "special": False}
                event = {"index": i + 1, "token": token, "generated_text": None, "details": None}
                yield f"data:{json.dumps(event)}\n\n".encode()
                if last:
                    eos = {"id": 2, "text": "</s>", "logprob": -0.1, "special": True}
                    details = {"finish_reason": "length", "generated_tokens": n, "seed": None}
                    final = {
                        "index": n + 1,
                        "token": eos,
                        "details": details,
                        "generated_text": "".join(WORDS[:n]),
                    }
                    yield f"data:{json.dumps(final)}\n\n".encode()

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/generate")
    async def generate(request: Request) -> Any:
        body = await request.json()
        params = body.get("parameters") or {}
        if (bad := _invalid(params)) is not None:
            return bad
        n = int(params.get("max_new_tokens") or 20)
        await asyncio.sleep(FIRST_S + (n - 1) * TOKEN_S)
        details = {"finish_reason": "length", "generated_tokens": n, "seed": None}
        return {"generated_text": "".join(WORDS[:n]), "details": details}

    return app


@pytest.fixture(scope="module")
def tgi_url() -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    config = uvicorn.Config(_tgi_app(), log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "TGI stand-in did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_generate_stream_timing_and_usage(tgi_url: str) -> None:
    n = 10
    rec, text = drive(tgi_url, "tgi", max_tokens=n)
    assert rec.status == "ok", rec.error
    assert rec.endpoint == "/generate_stream"
    assert text == "".join(WORDS[:n])
    assert rec.output_tokens == n and rec.token_source == "usage"
    assert rec.finish_reason == "length"
    assert rec.ttft_s is not None and FIRST_S <= rec.ttft_s < FIRST_S + 0.3
    assert len(rec.itl_s) == n - 1
    assert 0.5 * TOKEN_S <= statistics.median(rec.itl_s) < 4 * TOKEN_S
    assert rec.tpot_s is not None and rec.tpot_s >= 0.5 * TOKEN_S


def test_generate_sync(tgi_url: str) -> None:
    rec, text = drive(tgi_url, "tgi", mode="sync", max_tokens=6)
    assert rec.status == "ok", rec.error
    assert rec.endpoint == "/generate" and text == "".join(WORDS[:6])
    assert rec.output_tokens == 6 and rec.token_source == "usage"
    assert rec.ttft_s is not None and rec.ttft_s >= FIRST_S + 5 * TOKEN_S


def test_validation_error_and_mid_stream_error(tgi_url: str) -> None:
    rec, _ = drive(tgi_url, "tgi", max_tokens=LIMIT + 1)
    assert rec.status == "http_4xx" and rec.http_status == 422
    assert rec.error is not None and "Input validation error" in rec.error
    rec, text = drive(tgi_url, "tgi", prompt="please fail", max_tokens=8)
    assert rec.status == "protocol"
    assert rec.error is not None and "Request failed during generation" in rec.error
    assert text == "".join(WORDS[:2])


def test_loadtests_run_with_tgi_protocol(tgi_url: str, tmp_path: Path) -> None:
    summary = loadtest(
        tmp_path / "run",
        "--target",
        tgi_url,
        "--protocol",
        "tgi",
        "--modes",
        "sync,stream",
        "--users",
        "2",
        "--spawn-rate",
        "10",
        "--pacing",
        "0.2s",
        "--duration",
        "1.5s",
        "--max-tokens",
        "8",
    )
    for name in ("sync", "stream"):
        phase = summary["phases"][name]
        assert phase["count"] >= 2 and phase["ok"] == phase["count"], phase["errors"]
        assert phase["output_tokens"]["p50"] == 8
    assert (
        summary["phases"]["stream"]["ttft_ms"]["p50"] < summary["phases"]["sync"]["ttft_ms"]["p50"]
    )
