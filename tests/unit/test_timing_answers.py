"""The timing core on tool calls, reasoning and empty answers (fake chunks, fake clock).

Each record has TTFT (the first generated token, reasoning included) and TTFO (the first
*output* token: answer text or a tool call's first piece, after any reasoning); a tool
call is timed like text; an answer whose tokens never showed is ``ok`` and ``no_output``.
"""

from __future__ import annotations

import json

import pytest

from llmload.loadtests.measure.adapters.openai_chat import OpenAIChat
from llmload.loadtests.measure.timing import StreamTimer
from tests.unit.timing_helpers import DONE, delta, ev, finish, meta, run_stream, usage


def call(index: int = 0, *, name: str | None = None, args: str | None = None, **kw) -> dict:
    fn = {k: v for k, v in (("name", name), ("arguments", args)) if v is not None}
    return {"index": index, **kw, "function": fn}


def raw(d: dict) -> bytes:
    """A chunk with exactly this delta (``delta()`` leaves a null content out)."""
    return ev({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d}]})


def test_a_streamed_tool_call_is_timed_like_text():
    head = call(name="get_weather", args="", id="call_1", type="function")
    chunks = [
        (delta("", role="assistant"), 0.1),
        (delta(None, tool_calls=[head]), 0.2),  # vLLM: the name alone, content absent
        (delta(None, tool_calls=[call(args='{"city": ')]), 0.22),
        (delta(None, tool_calls=[call(args='"Paris"}')]), 0.24),
        (finish("tool_calls"), 0.25),
        (usage(3), 0.26),
        (DONE, 0.27),
    ]
    r = run_stream(chunks, 0.3)
    assert r.status == "ok" and r.finish_reason == "tool_calls"
    assert r.ttft_s == pytest.approx(0.2) and r.ttfo_s == pytest.approx(0.2)
    assert r.itl_s == pytest.approx([0.02, 0.02]) and r.tpot_s == pytest.approx(0.02)
    assert (r.output_tokens, r.client_output_tokens, r.tool_calls) == (3, 3, 1)
    assert r.reasoning_tokens == 0 and not r.no_output
    # OpenAI's shape: content null in every delta, arguments "" beside the name
    openai = [
        (raw({"role": "assistant", "content": None, "tool_calls": [head]}), 0.2),
        (raw({"content": None, "tool_calls": [call(args="{}")]}), 0.25),
        (finish("tool_calls"), 0.26),
        (DONE, 0.27),
    ]
    r = run_stream(openai, 0.3)
    assert r.ttft_s == pytest.approx(0.2) and r.tool_calls == 1 and r.output_tokens == 2


def test_parallel_tool_calls_are_counted_and_the_history_keeps_no_call_text():
    chunks = [
        (delta(None, tool_calls=[call(0, name="a", id="c0"), call(1, name="b", id="c1")]), 0.2),
        (delta(None, tool_calls=[call(1, args="{}")]), 0.21),
        (finish("tool_calls"), 0.22),
        (DONE, 0.23),
    ]
    timer = StreamTimer(OpenAIChat(), 0.0)
    for c, t in chunks:
        timer.feed(c, t)
    assert timer.text == ""  # a call is not reply text
    assert timer.finish(0.3, meta()).tool_calls == 2


def test_reasoning_first_gives_ttfo_after_it_and_counts_reasoning_tokens():
    chunks = [
        (delta("", role="assistant"), 0.1),
        (delta(None, reasoning_content="let"), 0.2),
        (delta(None, reasoning_content=" me"), 0.22),
        (delta(None, reasoning=" think"), 0.24),  # newer vLLM's field name
        (delta(" answer"), 0.26),
        (delta(" here"), 0.28),
        (finish("stop"), 0.29),
        (DONE, 0.3),
    ]
    r = run_stream(chunks, 0.3)
    assert r.ttft_s == pytest.approx(0.2) and r.ttfo_s == pytest.approx(0.26)
    assert r.reasoning_tokens == 3 and r.output_tokens == 5  # counted: reasoning events
    # the server's usage detail wins over the count
    detailed = {
        "prompt_tokens": 64,
        "completion_tokens": 40,
        "completion_tokens_details": {"reasoning_tokens": 30},
        "prompt_tokens_details": {"cached_tokens": 16},
    }
    tail = [(ev({"choices": [], "usage": detailed}), 0.295), (DONE, 0.3)]
    r = run_stream(chunks[:-1] + tail, 0.3)
    assert (r.reasoning_tokens, r.output_tokens, r.cached_tokens) == (30, 40, 16)
    # with a tokenizer: its count of the reasoning text
    r = run_stream(chunks, 0.3, tokenizer=lambda text: len(text.split()))
    assert r.reasoning_tokens == 3


def test_an_event_with_the_end_of_reasoning_and_the_answer_starts_the_output():
    chunks = [
        (delta(None, reasoning_content="hm"), 0.2),
        (delta("yes", reasoning_content=" ok"), 0.25),  # reasoning ends inside one delta
        (DONE, 0.3),
    ]
    timer = StreamTimer(OpenAIChat(), 0.0)
    for c, t in chunks:
        timer.feed(c, t)
    assert timer.text == "yes" and timer.reasoning_text == "hm ok"
    r = timer.finish(0.3, meta())
    assert r.ttft_s == pytest.approx(0.2) and r.ttfo_s == pytest.approx(0.25)


def test_reasoning_that_uses_every_token_has_no_ttfo():
    r = run_stream(
        [(delta(None, reasoning_content="a"), 0.2), (finish("length"), 0.3), (DONE, 0.3)], 0.3
    )
    assert r.ttft_s == pytest.approx(0.2) and r.ttfo_s is None and not r.no_output


def test_tokens_in_usage_and_nothing_visible_is_ok_and_no_output():
    chunks = [
        (delta("", role="assistant"), 0.1),
        (finish("stop"), 0.5),
        (usage(24), 0.5),
        (DONE, 0.5),
    ]
    r = run_stream(chunks, 0.5)
    assert r.status == "ok" and r.no_output
    assert r.ttft_s is None and r.ttfo_s is None and r.output_tokens == 24
    # no usage: nothing says tokens were generated, so no mark
    r = run_stream([(finish("stop"), 0.5), (DONE, 0.5)], 0.5)
    assert r.status == "ok" and not r.no_output
    # a failed request is never marked
    r = run_stream([(usage(5), 0.5)], 0.5, status="disconnect", error="cut")
    assert r.status == "disconnect" and not r.no_output


def test_sync_bodies_of_each_shape():
    def body(message: dict, reason: str, **usage_extra) -> bytes:
        obj = {
            "choices": [{"index": 0, "message": message, "finish_reason": reason}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 6, **usage_extra},
        }
        return json.dumps(obj).encode()

    def sync(raw: bytes):
        timer = StreamTimer(OpenAIChat(), 0.0)
        timer.headers(0.01, 200)
        timer.feed_body(raw, 0.4)
        return timer.finish(0.4, meta("sync"))

    tool = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    r = sync(body({"role": "assistant", "content": None, "tool_calls": [tool]}, "tool_calls"))
    assert r.ok and r.ttft_s == pytest.approx(0.4) and r.ttfo_s == pytest.approx(0.4)
    assert r.tool_calls == 1 and not r.no_output
    details = {"completion_tokens_details": {"reasoning_tokens": 4}}
    r = sync(
        body({"role": "assistant", "content": "a", "reasoning_content": "r"}, "stop", **details)
    )
    assert r.reasoning_tokens == 4 and r.ttfo_s == pytest.approx(0.4)
    r = sync(body({"role": "assistant", "content": "a", "reasoning_content": "r"}, "stop"))
    assert r.reasoning_tokens is None  # one body, no detail, no tokenizer: not countable
    r = sync(body({"role": "assistant", "content": ""}, "stop"))
    assert r.ok and r.no_output and r.ttft_s is None and r.output_tokens == 6


@pytest.mark.parametrize(
    "bad",
    [
        {"tool_calls": "x"},
        {"tool_calls": [1]},
        {"tool_calls": [{"index": "0", "function": {"name": "f"}}]},
        {"tool_calls": [{"index": 0, "function": {"name": 3}}]},
    ],
)
def test_a_malformed_tool_call_is_a_protocol_error_not_a_traceback(bad):
    r = run_stream([(ev({"choices": [{"index": 0, "delta": bad}]}), 0.2), (DONE, 0.3)], 0.3)
    assert r.status == "protocol" and "tool" in (r.error or "")
