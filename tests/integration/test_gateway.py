"""An LLM gateway in front of the server: it strips the server's timings and re-chunks the stream.

A small stand-in for a LiteLLM-style proxy: it forwards ``/v1/chat/completions``
to the bundled synthetic server, removes ``x_llmload`` from every chunk (so the
records carry no server timings) and releases the events it has gathered every
``HOLD_S`` in one write — stalls followed by bursts, what users see as stutter.
The diagnosis must come from the client's own gaps, and say which numbers can
no longer be split into server and path.  Straight at the server, nothing.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from llmload.reports.table.diagnostics import detect
from tests.fixtures.drive import drive_together

HOLD_S, TTFT_MS, ITL_MS, TOKENS = 0.15, 100, 15, 30


def _strip(event: bytes) -> bytes:
    if not event.startswith(b"data: {"):
        return event
    obj = json.loads(event[6:])
    obj.pop("x_llmload", None)
    return b"data: " + json.dumps(obj).encode()


def _gateway_app(upstream: str) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        client = httpx.AsyncClient(base_url=upstream, timeout=60)

        async def relay() -> AsyncIterator[bytes]:
            held: list[bytes] = []
            last = time.monotonic()
            async with client, client.stream("POST", "/v1/chat/completions", json=body) as up:
                buf = b""
                async for chunk in up.aiter_bytes():
                    buf += chunk
                    *events, buf = buf.split(b"\n\n")
                    held += [_strip(e) + b"\n\n" for e in events if e.strip()]
                    if held and time.monotonic() - last >= HOLD_S:
                        yield b"".join(held)
                        held, last = [], time.monotonic()
                        await asyncio.sleep(0)
            if held:
                yield b"".join(held)

        return StreamingResponse(relay(), media_type="text/event-stream")

    return app


@pytest.fixture()
def gateway(start_server: Callable[..., Any]) -> Iterator[tuple[str, str]]:
    """(gateway URL, server URL)."""
    server = start_server(ttft_ms=TTFT_MS, itl_ms=ITL_MS)  # the synthetic engine
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    proxy = uvicorn.Server(
        uvicorn.Config(_gateway_app(server.url), log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=proxy.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not proxy.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proxy.started, "gateway stand-in did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", server.url
    finally:
        proxy.should_exit = True
        thread.join(10)


def test_a_rechunking_gateway_is_diagnosed_as_stutter(gateway: tuple[str, str]) -> None:
    via, direct = gateway
    model = httpx.get(direct + "/v1/models").json()["data"][0]["id"]
    through = drive_together(4, via, "openai-chat", max_tokens=TOKENS, model=model)
    assert all(r.ok and r.output_tokens == TOKENS for r in through), [r.error for r in through]
    assert all(r.server_ttft_s is None for r in through)  # the gateway stripped them
    found = {d.code: d for d in detect(through, "stream")}
    assert "stream_stutter" in found, [(r.itl_s[:12]) for r in through]
    d = found["stream_stutter"]
    assert d.evidence["server_timings"] is False
    assert "cannot be split into server time and path" in d.hint
    assert d.evidence["median_longest_stall_ms"] >= 0.5 * HOLD_S * 1000

    straight = drive_together(4, direct, "openai-chat", max_tokens=TOKENS, model=model)
    assert all(r.ok and r.server_ttft_s is not None for r in straight)
    # straight at the server the tokens flow (a starved test machine may clump a few reads)
    flagged = {d.code: d for d in detect(straight, "stream")}.get("stream_stutter")
    few = flagged.evidence["stuttering_requests"] if flagged else 0
    assert few < d.evidence["stuttering_requests"]
