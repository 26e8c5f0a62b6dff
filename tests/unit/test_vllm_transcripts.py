"""Real servers' streams and bodies (recorded: ``tests/fixtures/transcripts``: vLLM 0.32,
and a LiteLLM 1.108 proxy in front of the bundled server) through the timing core, each
event a read of its own at a fake clock, and whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmload.loadtests.measure.adapters import get_adapter
from llmload.loadtests.measure.adapters.base import Prompt
from tests.unit.timing_helpers import run_stream

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts"
HERE = FIXTURES / "vllm-0.32"


def body(name: str, folder: Path = HERE) -> bytes:
    """The response body of a ``curl -i`` transcript (after the headers' blank line)."""
    raw = (folder / name).read_bytes()
    return raw.split(b"\r\n\r\n", 1)[1]


def events(name: str, folder: Path = HERE) -> list[bytes]:
    return [e + b"\n\n" for e in body(name, folder).split(b"\n\n") if e.strip()]


@pytest.mark.parametrize(
    ("protocol", "name", "content_events"),
    [
        ("openai-responses", "responses_stream.txt", 9),
        ("anthropic-messages", "messages_stream.txt", 11),
        ("openai-chat", "chat_stream_usage.txt", None),
    ],
)
@pytest.mark.parametrize("whole", [False, True], ids=["event-per-read", "one-read"])
def test_vllm_streams(protocol: str, name: str, content_events: int | None, whole: bool) -> None:
    evs = events(name)
    chunks = [(b"".join(evs), 0.1)] if whole else [(e, 0.1 + i * 0.01) for i, e in enumerate(evs)]
    r = run_stream(chunks, 1.0, adapter=get_adapter(protocol))
    assert r.status == "ok" and r.error is None and r.unknown_events == 0
    assert (r.output_tokens, r.token_source, r.prompt_tokens) == (16, "usage", 32)
    assert r.finish_reason == "length"  # 16 of max 16 (Responses: status incomplete)
    assert r.stream_end == "done"  # response.completed, message_stop, [DONE]
    assert r.ttft_s is not None and r.ttfo_s == r.ttft_s
    if content_events is not None:
        assert len(r.itl_s) == content_events - 1  # a delta is an event, not a token
        assert all(gap == 0 for gap in r.itl_s) if whole else min(r.itl_s) > 0


@pytest.mark.parametrize(
    ("protocol", "name", "tokens", "finish"),
    [
        ("openai-responses", "responses_sync.txt", 16, "length"),
        ("anthropic-messages", "messages_sync.txt", 8, "stop"),
    ],
)
def test_vllm_bodies(protocol: str, name: str, tokens: int, finish: str) -> None:
    info = get_adapter(protocol).parse_body(body(name))
    assert info.done and info.error is None and info.content
    assert (info.usage_output_tokens, info.usage_prompt_tokens) == (tokens, 32)
    assert info.finish_reason == finish


@pytest.mark.parametrize(
    ("protocol", "name", "inputs", "tokens"),
    [
        ("openai-embeddings", "embeddings_batch.txt", 3, 21),
        ("openai-embeddings", "embeddings_base64.txt", 3, 21),
        ("rerank", "rerank_all.txt", 3, 44),
    ],
)
def test_vllm_pooling_bodies(protocol: str, name: str, inputs: int, tokens: int) -> None:
    adapter = get_adapter(protocol)
    texts = tuple(f"text {i}" for i in range(inputs))
    adapter.build(
        Prompt("s", "p", prompt="what is a cat", inputs=texts), mode="sync", model="m", options={}
    )
    info = adapter.parse_body(body(name))
    assert info.done and info.error is None and info.usage_prompt_tokens == tokens
    # one text fewer sent than vLLM answered for: the mismatch is named, not passed
    adapter.build(
        Prompt("s", "p", prompt="q", inputs=texts[:-1]), mode="sync", model="m", options={}
    )
    with pytest.raises(ValueError, match=f"{inputs} (vectors|results) for {inputs - 1}"):
        adapter.parse_body(body(name))


def test_vllm_pooling_error_body() -> None:
    info = get_adapter("openai-embeddings").parse_body(body("embeddings_wrong_model.txt"))
    assert info.error is not None and "no-such-model" in info.error


@pytest.mark.parametrize(
    ("protocol", "name", "prompt", "tokens", "deltas"),
    [
        # named events in Python's json spacing; the prompt counted only in message_delta
        ("anthropic-messages", "messages_stream.txt", 7, 13, 13),
        # no event lines, an extra "model" in each event, then data: [DONE]
        ("openai-responses", "responses_stream.txt", 7, 16, 16),
    ],
)
def test_litellm_streams(protocol: str, name: str, prompt: int, tokens: int, deltas: int) -> None:
    evs = events(name, FIXTURES / "litellm")
    chunks = [(e, 0.1 + i * 0.01) for i, e in enumerate(evs)]
    r = run_stream(chunks, 1.0, adapter=get_adapter(protocol))
    assert r.status == "ok" and r.error is None and r.unknown_events == 0
    assert r.stream_end == "done" and r.ttft_s is not None
    assert (r.prompt_tokens, r.output_tokens, r.token_source) == (prompt, tokens, "usage")
    assert len(r.itl_s) == deltas - 1
