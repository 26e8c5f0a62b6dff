"""Both transformers engines behind the real server, on the embedded model (built in the run)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmload.target_server.serving import ThreadedServer, start_server_thread
from llmload.target_server.settings import Settings

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "Write a short poem about autumn rain. 写一首诗。"}]


@pytest.fixture(scope="module", params=["none", "continuous"])
def server(request: pytest.FixtureRequest, embedded_model: Path) -> Iterator[ThreadedServer]:
    settings = Settings(engine="transformers", batching=request.param, max_context=256)
    srv = start_server_thread(settings, log_level="warning")
    yield srv
    srv.stop()


def chat(srv: ThreadedServer, **body: Any) -> dict[str, Any]:
    body.setdefault("messages", MESSAGES)
    r = httpx.post(srv.url + CHAT, json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def stream_chat(srv: ThreadedServer, **body: Any) -> tuple[str, str, dict[str, Any], int]:
    """(text, finish_reason, usage, content events) of a streamed chat request."""
    body = {"messages": MESSAGES, **body, "stream": True, "stream_options": {"include_usage": True}}
    text, reason, usage, events = "", "", {}, 0
    with httpx.stream("POST", srv.url + CHAT, json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk["choices"]:
                content = choice["delta"].get("content")
                if content:
                    text += content
                    events += 1
                reason = choice.get("finish_reason") or reason
    return text, reason, usage, events


def test_stream_and_sync_give_the_same_tokens_and_exact_usage(
    server: ThreadedServer, embedded_tokenizer: Any
) -> None:
    prompt = embedded_tokenizer.apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=False
    )
    prompt_tokens = len(embedded_tokenizer.encode(prompt, add_special_tokens=False))
    body = {"max_tokens": 24, "ignore_eos": True, "seed": 11}
    text, reason, usage, events = stream_chat(server, **body)
    sync = chat(server, **body)
    assert usage == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 24,
        "total_tokens": prompt_tokens + 24,
    }
    assert sync["usage"] == usage
    assert reason == sync["choices"][0]["finish_reason"] == "length"
    assert sync["choices"][0]["message"]["content"] == text
    assert 0 < events <= 24


def test_seed_fixes_the_sample_and_temperature_zero_is_greedy(server: ThreadedServer) -> None:
    def text(**kw: Any) -> str:
        return chat(server, max_tokens=16, ignore_eos=True, **kw)["choices"][0]["message"][
            "content"
        ]

    assert text(seed=1) == text(seed=1)
    assert text(seed=1) != text(seed=2)
    assert text(temperature=0.0) == text(temperature=0.0, seed=5)
    # top_p close to 0 keeps only the most likely token: greedy again
    assert text(seed=3, top_p=1e-6) == text(temperature=0.0)


def test_max_and_min_tokens(server: ThreadedServer) -> None:
    for n in (1, 7):
        out = chat(server, max_tokens=n, min_tokens=n, seed=4)
        assert out["usage"]["completion_tokens"] == n
        assert out["choices"][0]["finish_reason"] == "length"


def test_stop_string_cuts_the_output(server: ThreadedServer) -> None:
    body = {"max_tokens": 40, "ignore_eos": True, "seed": 21}
    full = chat(server, **body)["choices"][0]["message"]["content"]
    stop = full[12:14]
    assert stop.strip() and "\ufffd" not in stop, full
    out = chat(server, **body, stop=[stop])
    assert out["choices"][0]["message"]["content"] == full[: full.index(stop)]
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"]["completion_tokens"] < 40


def test_prompt_longer_than_the_context_is_a_400(server: ThreadedServer) -> None:
    r = httpx.post(
        server.url + CHAT,
        json={"messages": [{"role": "user", "content": "the server " * 300}], "max_tokens": 4},
        timeout=30,
    )
    assert r.status_code == 400
    assert "context" in r.json()["error"]["message"]


def test_disconnect_stops_generation_and_leaves_no_threads(server: ThreadedServer) -> None:
    baseline = {t.name for t in threading.enumerate()}
    body = {"messages": MESSAGES, "max_tokens": 200, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", server.url + CHAT, json=body) as r:
            assert r.status_code == 200
            seen = 0
            lines = r.iter_lines()
            for line in lines:
                seen += '"content":"' in line
                if seen == 3:
                    break
            assert server.engine.running() == 1
    t0 = time.monotonic()
    while server.engine.running() and time.monotonic() - t0 < 5:
        time.sleep(0.005)
    assert server.engine.running() == 0
    generating = [t.name for t in threading.enumerate() if t.name.startswith("generate-")]
    assert generating == []
    assert {t.name for t in threading.enumerate()} <= baseline | {"decode-loop"}
    # the server counted it as a disconnect, and still answers
    assert chat(server, max_tokens=2)["usage"]["completion_tokens"] <= 2


def test_engine_speed_probe_measures_the_server_it_is_pointed_at(start_server) -> None:
    from llmload.speedcheck import PROBE_TOKENS, engine_speed

    server = start_server(ttft_ms=5, itl_ms=5)  # the synthetic engine
    speed = engine_speed(server.url, 4)
    # 4 streams of PROBE_TOKENS tokens, one every 5 ms: at most 4 x 200 tokens/s
    assert 0 < speed <= 4 * 1000 / 5 * 1.2
    assert speed > 4 * PROBE_TOKENS / 10  # and not absurdly slow (generous for a busy machine)
