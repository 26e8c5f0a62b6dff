"""Builders of OpenAI-style SSE byte streams for the timing-core tests (fake chunks, fake clock)."""

from __future__ import annotations

import json
from typing import Any

from llmload.loadtests.measure.adapters.openai_chat import OpenAIChat
from llmload.loadtests.measure.record import Mode
from llmload.loadtests.measure.timing import RecordMeta, StreamTimer

DONE = b"data: [DONE]\n\n"


def ev(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def delta(content: str | None = None, *, role: str | None = None, **extra: Any) -> bytes:
    d: dict[str, Any] = {}
    if role is not None:
        d["role"] = role
    if content is not None:
        d["content"] = content
    d.update(extra)
    return ev({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d}]})


def finish(reason: str = "stop", **top: Any) -> bytes:
    return ev({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}], **top})


def usage(completion: int, prompt: int = 7, **top: Any) -> bytes:
    u = {"prompt_tokens": prompt, "completion_tokens": completion}
    return ev({"choices": [], "usage": u, **top})


def meta(mode: Mode = "stream", **kw: Any) -> RecordMeta:
    base: dict[str, Any] = dict(
        request_id="r-1",
        phase="stream",
        scenario="short_qa",
        mode=mode,
        endpoint="/v1/chat/completions",
        started_at=1_700_000_000.0,
    )
    base.update(kw)
    return RecordMeta(**base)


def run_stream(
    timed_chunks: list[tuple[bytes, float]],
    t_end: float,
    *,
    t0: float = 0.0,
    headers_at: float | None = 0.01,
    http_status: int = 200,
    tokenizer: Any = None,
    adapter: Any = None,
    **finish_kw: Any,
):
    timer = StreamTimer(adapter or OpenAIChat(), t0, tokenizer=tokenizer)
    if headers_at is not None:
        timer.headers(headers_at, http_status)
    for chunk, t in timed_chunks:
        timer.feed(chunk, t)
    return timer.finish(t_end, meta(), **finish_kw)
