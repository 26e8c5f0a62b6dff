"""``--engine-process on``: the continuous-batching loop in a child process, behind the real server.

The server runs in this process (``start_server``) so the test can reach the
engine object and its child; the embedded model keeps each start cheap.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmload.target_server.engine import EngineFault, GenerationRequest
from llmload.target_server.model import build
from llmload.target_server.settings import Settings

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "Tell me about the rain. 写一首诗。"}]


def _texts(engine: Any, bodies: list[dict[str, Any]]) -> list[str]:
    """Each request's text, all submitted together (so they share the batch)."""

    async def one(i: int, body: dict[str, Any]) -> str:
        req = GenerationRequest(f"r{i}", MESSAGES, None, **body)
        return "".join([p.text async for p in engine.generate(engine.prepare(req))])

    async def run() -> list[str]:
        await engine.start()
        try:
            return list(await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies))))
        finally:
            await engine.stop()

    return asyncio.run(run())


def test_seeded_requests_give_the_same_text_in_the_child_and_on_a_thread(
    embedded_model: Path,
) -> None:
    bodies: list[dict[str, Any]] = [
        {"max_tokens": 20, "seed": 3, "ignore_eos": True},
        {"max_tokens": 12, "min_tokens": 12, "seed": 4, "temperature": 0.7},
        {"max_tokens": 16, "seed": 5, "ignore_eos": True, "extra": {"repetition_penalty": 1.3}},
        {"max_tokens": 16, "temperature": 0.0, "ignore_eos": True},
    ]
    cont = Settings(engine="transformers", batching="continuous")
    child = build(cont)
    assert type(child).__name__ == "ProcessEngine"
    in_child = _texts(child, bodies)
    assert child.lm is not None and child.lm.model is None  # no weights in this process
    on_thread = _texts(build(cont.with_overrides(engine_process="off")), bodies)
    alone = _texts(build(cont.with_overrides(batching="none")), bodies)
    assert in_child == on_thread == alone
    assert all(in_child) and len(set(in_child)) == len(bodies)


def test_a_failing_step_fails_its_requests_and_the_loop_goes_on(embedded_model: Path) -> None:
    engine: Any = build(Settings(engine="transformers", batching="continuous"))

    async def run() -> tuple[str, str, float]:
        await engine.start()
        try:
            req = GenerationRequest("bad", None, "x", 4)
            bad = engine.prepare_ids(req, [10**6])  # beyond the vocabulary: the forward raises
            with pytest.raises(EngineFault) as info:
                _ = [piece async for piece in engine.generate(bad)]
            good = GenerationRequest("good", None, "hello", 6, ignore_eos=True)
            text = "".join([p.text async for p in engine.generate(engine.prepare(good))])
            return str(info.value), text, engine.extra_metrics()["engine_busy_ratio"]
        finally:
            await engine.stop()

    error, text, busy = asyncio.run(run())
    assert "generation failed" in error and "IndexError" in error
    assert text and engine.running() == 0
    assert 0.0 < busy <= 1.0  # the child's busy time reaches this process's gauge


def _stream_lines(url: str, body: dict[str, Any], lines: list[str], first: Any) -> None:
    body = {"messages": MESSAGES, **body, "stream": True}
    with httpx.stream("POST", url + CHAT, json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                lines.append(line)
                if len(lines) >= 3:  # the role delta, then generated tokens
                    first.set()


def test_a_killed_engine_process_fails_requests_cleanly(
    start_server: Any, embedded_model: Path
) -> None:
    import threading

    settings = Settings(engine="transformers", batching="continuous", max_context=512)
    srv = start_server(settings=settings)
    engine = srv.engine
    assert engine.pid and engine.pid != os.getpid()
    lines: list[str] = []
    first = threading.Event()
    body = {"max_tokens": 400, "ignore_eos": True}
    reader = threading.Thread(target=_stream_lines, args=(srv.url, body, lines, first))
    reader.start()
    assert first.wait(30)
    assert engine.batch_size() == 1  # the child's gauge, read here
    os.kill(engine.pid, signal.SIGKILL)
    reader.join(30)
    assert not reader.is_alive()
    # the stream ended with an error event, not [DONE]
    assert lines[-1] != "data: [DONE]"
    assert "error" in json.loads(lines[-1][6:])
    health = httpx.get(srv.url + "/health", timeout=10)
    assert health.status_code == 503
    assert health.json()["status"] == "failed" and "exit code" in health.json()["error"]
    r = httpx.post(srv.url + CHAT, json={"messages": MESSAGES, "max_tokens": 4}, timeout=10)
    assert r.status_code == 503 and r.json()["error"]["code"] == "engine_failed"
    assert engine.running() == 0
    t0 = time.monotonic()
    srv.stop()
    assert time.monotonic() - t0 < 10  # nothing waits on the dead child


@pytest.mark.parametrize(("asked", "runs"), [(64, 64), (0, 512)])
def test_the_child_runs_the_prefill_budget_asked(
    embedded_model: Path, asked: int, runs: int
) -> None:
    """``--prefill-budget`` reaches the engine process (0: the CPU default, 512), which says
    the budget it runs with; the gauge ``llmserve_engine_prefill_budget_tokens`` shows it."""
    engine = build(Settings(engine="transformers", batching="continuous", prefill_budget=asked))
    assert type(engine).__name__ == "ProcessEngine"

    async def run() -> dict[str, float]:
        await engine.start()
        try:
            return engine.extra_metrics()
        finally:
            await engine.stop()

    gauges = asyncio.run(run())
    assert engine.prefill_budget == runs
    assert gauges["engine_prefill_budget_tokens"] == runs
