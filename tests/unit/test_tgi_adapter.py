"""The TGI adapter through the real timing core, with fake chunks and a fake clock."""

from __future__ import annotations

import json

import pytest

from llmload.loadtests.measure.adapters.base import Prompt
from llmload.loadtests.measure.adapters.tgi import TgiAdapter
from llmload.loadtests.measure.timing import RecordMeta, StreamTimer


def _token(i: int, text: str, special: bool = False, final: str | None = None) -> bytes:
    details = {"finish_reason": "length", "generated_tokens": i, "seed": None} if final else None
    obj = {
        "index": i,
        "token": {"id": 100 + i, "text": text, "logprob": -0.1, "special": special},
        "generated_text": final,
        "details": details,
    }
    return f"data:{json.dumps(obj)}\n\n".encode()


def test_build_stream_and_sync() -> None:
    a = TgiAdapter()
    p = Prompt("s", "p", messages=[{"role": "user", "content": "hi"}], max_tokens=16)
    call = a.build(p, mode="stream", model="m", options={"temperature": 0.7, "seed": 3})
    assert (call.method, call.path, call.stream) == ("POST", "/generate_stream", True)
    assert call.json == {
        "inputs": "hi",
        "parameters": {
            "max_new_tokens": 16,
            "details": True,
            "temperature": 0.7,
            "do_sample": True,
            "seed": 3,
        },
    }
    sync = a.build(p, mode="sync", model="m", options={"temperature": 0})
    assert sync.path == "/generate" and a.endpoint == "/generate"
    assert sync.json is not None and "temperature" not in sync.json["parameters"]


def test_stream_tokens_special_and_usage() -> None:
    a = TgiAdapter()
    timer = StreamTimer(a, 0.0)
    timer.headers(0.01, 200)
    timer.feed(_token(1, "Hello"), 0.1)
    timer.feed(_token(2, " there") + _token(3, "!"), 0.15)
    timer.feed(_token(4, "</s>", special=True, final="Hello there!"), 0.2)
    rec = timer.finish(0.21, RecordMeta("r", "p", "s", "stream", "/generate_stream", 0.0))
    assert rec.status == "ok" and timer.text == "Hello there!"
    assert rec.ttft_s == pytest.approx(0.1)
    assert rec.output_tokens == 4 and rec.token_source == "usage"
    assert rec.finish_reason == "length"


def test_error_event_and_sync_body() -> None:
    a = TgiAdapter()
    info = a.parse_event(None, '{"error":"Input validation error","error_type":"validation"}')
    assert info.error == "Input validation error" and info.done
    body = b'{"generated_text":"abc","details":{"finish_reason":"eos_token","generated_tokens":3}}'
    out = a.parse_body(body)
    assert (out.content, out.usage_output_tokens, out.finish_reason) == ("abc", 3, "eos_token")
    assert a.parse_body(b'[{"generated_text":"x"}]').content == "x"
    with pytest.raises(ValueError):
        a.parse_body(b'{"text":"no"}')
    with pytest.raises(ValueError):
        a.parse_event(None, "not json")
