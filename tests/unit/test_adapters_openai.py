"""The OpenAI chat and completions adapters: request building and event/body meaning."""

from __future__ import annotations

import json

import pytest

from llmload.loadtests.measure.adapters import get_adapter
from llmload.loadtests.measure.adapters.base import ADAPTERS, Prompt
from llmload.loadtests.measure.adapters.openai_chat import OpenAIChat
from llmload.loadtests.measure.adapters.openai_completions import OpenAICompletions, render_messages

MSGS = [{"role": "user", "content": "用Python写一个快速排序"}]


def test_registered_and_endpoint_is_the_path():
    assert {"openai-chat", "openai-completions"} <= set(ADAPTERS)
    chat, comp = get_adapter("openai-chat"), get_adapter("openai-completions")
    assert (chat.name, chat.endpoint) == ("openai-chat", "/v1/chat/completions")
    assert (comp.name, comp.endpoint) == ("openai-completions", "/v1/completions")
    with pytest.raises(KeyError, match="openai-chat"):
        get_adapter("nope")


def test_chat_stream_request_asks_for_usage():
    call = OpenAIChat().build(
        Prompt("code_gen", "c1", messages=MSGS, max_tokens=256),
        mode="stream",
        model="m",
        options={},
    )
    assert (call.method, call.path, call.stream) == ("POST", "/v1/chat/completions", True)
    assert call.json == {
        "model": "m",
        "messages": MSGS,
        "max_tokens": 256,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_chat_sync_request_and_prompt_fallback():
    call = OpenAIChat().build(
        Prompt("short_qa", "q", prompt="hi", max_tokens=8), mode="sync", model="m", options={}
    )
    assert call.stream is False and call.json is not None
    assert call.json["stream"] is False and "stream_options" not in call.json
    assert call.json["messages"] == [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError):
        OpenAIChat().build(Prompt("x", "empty"), mode="sync", model="m", options={})


def test_options_are_merged_and_unknown_ones_rejected():
    options = {
        "temperature": 0.0,
        "top_p": 0.9,
        "seed": 7,
        "ignore_eos": True,
        "min_tokens": 32,
        "stop": ["\n\n"],
        "extra_body": {"top_k": 5, "max_tokens": 33},
        "headers": {"X-Trace": "1"},
    }
    for adapter in (OpenAIChat(), OpenAICompletions()):
        call = adapter.build(
            Prompt("s", "p", prompt="hi"), mode="stream", model="m", options=options
        )
        body = call.json or {}
        assert body["temperature"] == 0.0 and body["top_p"] == 0.9 and body["seed"] == 7
        assert body["ignore_eos"] is True and body["min_tokens"] == 32 and body["stop"] == ["\n\n"]
        assert body["top_k"] == 5 and body["max_tokens"] == 33  # extra_body wins
        assert call.headers == {"X-Trace": "1"}
    none = OpenAIChat().build(
        Prompt("s", "p", prompt="hi"), mode="sync", model="m", options={"temperature": None}
    )
    assert "temperature" not in (none.json or {})
    with pytest.raises(ValueError, match="temprature"):
        OpenAIChat().build(
            Prompt("s", "p", prompt="hi"), mode="sync", model="m", options={"temprature": 1}
        )


def test_completions_request_prompt_and_rendered_history():
    comp = OpenAICompletions()
    call = comp.build(
        Prompt("s", "p", prompt="Once upon", max_tokens=16), mode="stream", model="m", options={}
    )
    assert call.path == "/v1/completions" and call.json is not None
    assert call.json["prompt"] == "Once upon" and call.json["stream_options"] == {
        "include_usage": True
    }
    history = [
        *MSGS,
        {"role": "assistant", "content": "def qs(a): ..."},
        {"role": "user", "content": "加上类型注解"},
    ]
    call = comp.build(Prompt("s", "p", messages=history), mode="sync", model="m", options={})
    assert call.json is not None
    assert call.json["prompt"] == render_messages(history)
    assert call.json["prompt"].endswith("Assistant:") and "加上类型注解" in call.json["prompt"]


def chunk(**obj):
    return json.dumps(obj)


def test_chat_events():
    a = OpenAIChat()
    assert a.parse_event(None, "[DONE]").done
    role = a.parse_event(None, chunk(choices=[{"delta": {"role": "assistant", "content": ""}}]))
    assert role.content == "" and not role.done
    info = a.parse_event(None, chunk(choices=[{"delta": {"content": "春"}, "finish_reason": None}]))
    assert (info.content, info.reasoning) == ("春", False)
    info = a.parse_event(None, chunk(choices=[{"delta": {"reasoning_content": "hmm"}}]))
    assert (info.content, info.reasoning) == ("hmm", True)
    info = a.parse_event(None, chunk(choices=[{"delta": {"reasoning": "r", "content": "c"}}]))
    assert (info.content, info.reasoning) == ("rc", True)
    info = a.parse_event(
        None, chunk(choices=[], usage={"prompt_tokens": 3, "completion_tokens": 9})
    )
    assert (info.content, info.usage_output_tokens, info.usage_prompt_tokens) == ("", 9, 3)
    info = a.parse_event(
        None,
        chunk(
            choices=[{"delta": {}, "finish_reason": "length"}],
            x_llmload={"ttft_s": 0.2, "queue_s": None},
        ),
    )
    assert info.finish_reason == "length" and info.server == {"ttft_s": 0.2}
    info = a.parse_event(None, chunk(error={"message": "boom", "type": "server_error"}))
    assert info.error == "server_error: boom"


@pytest.mark.parametrize(
    "data",
    ["{oops", "[1, 2]", '"text"', chunk(choices=["x"]), chunk(choices=[{"delta": {"content": 5}}])],
)
def test_bad_events_raise_value_error(data):
    with pytest.raises(ValueError):
        OpenAIChat().parse_event(None, data)


def test_chat_body():
    body = {
        "choices": [
            {
                "message": {"role": "assistant", "content": "ok", "reasoning_content": "t"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 4, "completion_tokens": 2},
        "x_llmload": {"queue_s": 0.001, "ttft_s": 0.1, "e2e_s": 0.3},
    }
    info = OpenAIChat().parse_body(json.dumps(body).encode())
    assert (info.content, info.reasoning, info.done) == ("tok", True, True)
    assert (info.usage_output_tokens, info.usage_prompt_tokens) == (2, 4)
    assert info.server == {"queue_s": 0.001, "ttft_s": 0.1, "e2e_s": 0.3}
    assert info.finish_reason == "stop"
    assert OpenAIChat().parse_body(b'{"error": {"message": "nope"}}').error == "nope"
    assert OpenAIChat().parse_body(b'{"detail": "Not Found"}').error == "Not Found"
    with pytest.raises(ValueError):
        OpenAIChat().parse_body(b'{"object": "chat.completion"}')


def test_completions_events_and_body():
    a = OpenAICompletions()
    assert a.parse_event(None, chunk(choices=[{"text": "x"}])).content == "x"
    assert a.parse_event(None, chunk(choices=[{"text": ""}])).content == ""
    assert a.parse_event(None, "[DONE]").done
    body = {
        "choices": [{"text": "done", "finish_reason": "length"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
    info = a.parse_body(json.dumps(body).encode())
    assert (info.content, info.usage_output_tokens, info.finish_reason) == ("done", 1, "length")
    with pytest.raises(ValueError):
        a.parse_event(None, chunk(choices=[{"text": ["x"]}]))
