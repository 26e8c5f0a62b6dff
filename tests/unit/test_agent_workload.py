"""``--dataset agent``: the tool calls an answer made, and the steps a session builds from them."""

from __future__ import annotations

import json

import pytest

from llmload.loadtests.measure.adapters import get_adapter
from llmload.loadtests.measure.adapters.toolcalls import ToolCall, ToolCallTap
from llmload.loadtests.options import build_options
from llmload.loadtests.workload.agent import TOOL, AgentSessions
from llmload.loadtests.workload.build import build_workload
from llmload.loadtests.workload.random_dataset import default_codec


def chunk(delta: dict, finish: str | None = None) -> str:
    return json.dumps(
        {"id": "c", "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": delta, "finish_reason": finish}]}
    )  # fmt: skip


def call_delta(index: int, *, id_: str | None = None, name: str | None = None, args: str = ""):
    entry: dict = {"index": index, "function": {"arguments": args}}
    if id_:
        entry.update(id=id_, type="function")
        entry["function"]["name"] = name
    return chunk({"content": None, "tool_calls": [entry]})


def test_streamed_calls_are_joined_by_index_and_timed_as_tokens() -> None:
    tap = ToolCallTap(get_adapter("openai-chat"))
    events = [
        chunk({"role": "assistant", "content": ""}),
        call_delta(0, id_="call_a", name="search"),
        call_delta(0, args='{"query": '),
        call_delta(0, args='"cats"}'),
        call_delta(1, id_="call_b", name="search", args='{"query": "dogs"}'),
        chunk({}, "tool_calls"),
    ]
    infos = [tap.parse_event(None, e) for e in events]
    # each piece of a call is a token event: the name first, then the argument pieces
    assert [i.content for i in infos] == ["", "search", '{"query": ', '"cats"}',
                                          'search{"query": "dogs"}', ""]  # fmt: skip
    assert infos[-1].finish_reason == "tool_calls"
    assert [c.message() for c in tap.calls] == [
        ToolCall("call_a", "search", '{"query": "cats"}').message(),
        ToolCall("call_b", "search", '{"query": "dogs"}').message(),
    ]
    tap.build(prompt_of(), mode="stream", model="m", options={})
    assert tap.calls == []  # a new request starts with none


def test_a_sync_answers_calls_and_plain_text_pass_through() -> None:
    tap = ToolCallTap(get_adapter("openai-chat"))
    body = {
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": "call_z", "type": "function",
                "function": {"name": "search", "arguments": '{"query": "x"}'}}]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 4},
    }  # fmt: skip
    info = tap.parse_body(json.dumps(body).encode())
    assert info.content == 'search{"query": "x"}' and info.usage_output_tokens == 4
    assert tap.calls == [ToolCall("call_z", "search", '{"query": "x"}')]
    plain = tap.parse_event(None, chunk({"content": "hello"}))
    assert plain.content == "hello"


def prompt_of():
    from llmload.loadtests.measure.adapters.base import Prompt

    return Prompt("agent", "p", messages=[{"role": "user", "content": "q"}], tools=(TOOL,))


def sessions(steps: int = 3, result_tokens: int = 40) -> AgentSessions:
    opts = build_options(
        {},
        {
            "dataset": ["agent"],
            "scenario": "short_qa",
            "agent_steps": steps,
            "tool_result_tokens": result_tokens,
            "think_time": "250ms",
        },
    )
    workload = build_workload(opts.workload, seed=0)
    return workload.for_user(7)


def test_a_session_carries_its_calls_and_results_back_step_by_step() -> None:
    s = sessions(steps=3, result_tokens=40)
    assert s.think_s == 0.25
    first = s.next()
    assert (first.session_id, first.step, first.tool_choice) == ("7-0", 0, None)
    assert first.tools == (TOOL,) and [m["role"] for m in first.messages or []] == ["user"]
    call = ToolCall("call_1", "search", '{"query": "a"}')
    second = s.follow([call])
    assert second is not None and second.step == 1 and second.session_id == "7-0"
    roles = [m["role"] for m in second.messages or []]
    assert roles == ["user", "assistant", "tool"]
    assistant, tool = (second.messages or [])[1:]
    assert assistant["content"] is None and assistant["tool_calls"] == [call.message()]
    assert tool["tool_call_id"] == "call_1"
    assert len(default_codec().encode(tool["content"])) == 40  # exact in the tokenizer
    last = s.follow([ToolCall("call_2", "search", "{}")])
    assert last is not None and last.step == 2 and last.tool_choice == "none"
    assert len(last.messages or []) == 5
    assert s.follow([ToolCall("call_3", "search", "{}")]) is None  # K steps: over
    again = s.next()
    assert again.session_id == "7-1" and again.step == 0
    assert s.follow([]) is None  # an answer without a call is the final one


def test_agent_options() -> None:
    for bad, msg in [
        ({"agent_steps": 3}, "need --dataset agent"),
        ({"dataset": ["agent"], "protocol": "openai-completions"}, "needs --protocol openai-chat"),
        ({"dataset": ["agent"], "num_prompts": 10}, "--num-prompts"),
        ({"dataset": ["agent"], "turns": 2}, "--turns"),
        ({"dataset": ["agent"], "tool_result_tokens": 0}, "must be >= 1"),
    ]:
        with pytest.raises(ValueError, match=msg):
            build_options({}, bad)
    info = build_workload(build_options({}, {"dataset": ["agent"]}).workload, 0).describe()
    assert info["agent"]["steps"] == 4 and info["agent"]["tool_result_tokens"] == 256
