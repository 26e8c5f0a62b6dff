"""The synthetic engine's answer shapes over real HTTP, from ``llmload serve`` (a subprocess).

Reasoning first (``--reasoning-tokens``: vLLM's ``delta.reasoning_content``, then content;
``usage.completion_tokens_details.reasoning_tokens``), tool calls for requests that carry
``tools`` (``--tool-call-rate``: the OpenAI/vLLM streamed shape, finish ``tool_calls``)
and answers with no visible output (``--empty-rate``), streamed and in the sync JSON
body; the OpenAI SDK reads each back.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

CHAT = "/v1/chat/completions"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "search"}},
]


def body(n: int = 8, stream: bool = True, **extra: object) -> dict:
    out: dict = {
        "messages": [{"role": "user", "content": "what is the weather"}],
        "max_tokens": n,
        "ignore_eos": True,
        "stream": stream,
        **extra,
    }
    if stream:
        out["stream_options"] = {"include_usage": True}
    return out


def chunks(url: str, payload: dict) -> list[dict]:
    """The JSON chunks of one streamed answer (``[DONE]`` checked and left out)."""
    with httpx.Client(timeout=10) as client, client.stream("POST", url + CHAT, json=payload) as r:
        assert r.status_code == 200, r.read()
        data = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


def deltas(stream: list[dict]) -> list[dict]:
    return [c["choices"][0]["delta"] for c in stream if c["choices"]]


def finish(stream: list[dict]) -> str:
    return next(
        c["choices"][0]["finish_reason"]
        for c in stream
        if c["choices"] and c["choices"][0]["finish_reason"]
    )


@pytest.fixture
def reasoning_server(start_server_proc):
    return start_server_proc("--ttft-ms", "5", "--itl-ms", "2", "--reasoning-tokens", "3")


def test_reasoning_first_then_content_streamed_and_sync(reasoning_server):
    url = reasoning_server.url
    stream = chunks(url, body(8))
    ds = deltas(stream)
    assert ds[0] == {"role": "assistant", "content": ""}
    kinds = ["reasoning" if "reasoning_content" in d else "content" for d in ds[1:] if d]
    assert kinds == ["reasoning"] * 3 + ["content"] * 5
    assert all(d["reasoning_content"] for d in ds[1:4]) and all(d["content"] for d in ds[4:9])
    usage = stream[-1]["usage"]
    assert usage["completion_tokens"] == 8
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 3}
    assert finish(stream) == "length"

    sync = httpx.post(url + CHAT, json=body(8, stream=False), timeout=10).json()
    message = sync["choices"][0]["message"]
    assert len(message["reasoning_content"].split()) == 3 and len(message["content"].split()) == 5
    assert sync["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}

    # fewer tokens than the reasoning: all of them reasoning, no answer text
    short = deltas(chunks(url, body(2)))
    assert [d for d in short[1:] if d.get("content")] == []
    # completions have no reasoning channel: plain text, no details
    comp = httpx.post(
        url + "/v1/completions",
        json={"prompt": "hi", "max_tokens": 4, "ignore_eos": True},
        timeout=10,
    ).json()
    assert (
        len(comp["choices"][0]["text"].split()) == 4
        and "completion_tokens_details" not in comp["usage"]
    )


def test_a_request_with_tools_gets_a_streamed_tool_call(start_server_proc):
    url = start_server_proc("--ttft-ms", "5", "--itl-ms", "2").url  # --tool-call-rate 1.0
    stream = chunks(url, body(8, tools=TOOLS))
    ds = deltas(stream)
    assert ds[0] == {"role": "assistant", "content": ""}
    calls = [d for d in ds[1:] if d]
    assert len(calls) == 8  # one event per token: the name, then 7 pieces of arguments
    assert all(d["content"] is None and len(d["tool_calls"]) == 1 for d in calls)
    head = calls[0]["tool_calls"][0]
    assert head["index"] == 0 and head["type"] == "function" and head["id"].startswith("call_")
    assert head["function"] == {"name": "get_weather", "arguments": ""}
    pieces = [d["tool_calls"][0] for d in calls[1:]]
    assert all(p["index"] == 0 and set(p) == {"index", "function"} for p in pieces)
    arguments = "".join(p["function"]["arguments"] for p in pieces)
    assert len(json.loads(arguments)["query"].split()) == 7
    assert finish(stream) == "tool_calls"
    assert stream[-1]["usage"]["completion_tokens"] == 8

    sync = httpx.post(url + CHAT, json=body(8, stream=False, tools=TOOLS), timeout=10).json()
    choice = sync["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert len(json.loads(call["function"]["arguments"])["query"].split()) == 7

    # the OpenAI SDK reads both shapes
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    msgs = [{"role": "user", "content": "weather?"}]
    full = client.chat.completions.create(
        model="llmload-synthetic", messages=msgs, tools=TOOLS, max_tokens=5
    )
    assert full.choices[0].message.tool_calls[0].function.name == "get_weather"
    sdk = client.chat.completions.create(
        model="llmload-synthetic", messages=msgs, tools=TOOLS, max_tokens=5, stream=True
    )
    args = "".join(
        c.choices[0].delta.tool_calls[0].function.arguments or ""
        for c in sdk
        if c.choices and c.choices[0].delta.tool_calls
    )
    assert json.loads(args)["query"]


def test_tool_choice_and_the_rate_decide_the_call(start_server_proc):
    url = start_server_proc("--ttft-ms", "1", "--itl-ms", "1", "--tool-call-rate", "0.5").url
    named = {"type": "function", "function": {"name": "search"}}
    kinds = []
    for _ in range(40):
        ds = deltas(chunks(url, body(3, tools=TOOLS)))
        kinds.append("tool" if any(d.get("tool_calls") for d in ds) else "text")
    assert 8 <= kinds.count("tool") <= 32  # half of them, seeded
    for _ in range(5):  # required / a named function: always a call, of that function
        head = deltas(chunks(url, body(3, tools=TOOLS, tool_choice=named)))[1]
        assert head["tool_calls"][0]["function"]["name"] == "search"
        assert deltas(chunks(url, body(3, tools=TOOLS, tool_choice="required")))[1].get(
            "tool_calls"
        )
        assert deltas(chunks(url, body(3, tools=TOOLS, tool_choice="none")))[1]["content"]
        assert deltas(chunks(url, body(3)))[1]["content"]  # no tools: text
    bad = httpx.post(
        url + CHAT,
        json=body(3, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}),
        timeout=10,
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tool_choice"
    bad = httpx.post(
        url + CHAT, json=body(3, tools=[{"type": "function", "function": {}}]), timeout=10
    )
    assert bad.status_code == 400 and "tools" in bad.json()["error"]["message"]


def test_empty_answers_count_tokens_and_show_nothing(start_server_proc):
    url = start_server_proc("--ttft-ms", "5", "--itl-ms", "2", "--empty-rate", "1").url
    stream = chunks(url, body(6))
    assert [d for d in deltas(stream)[1:] if d] == []  # the role event, then nothing visible
    assert finish(stream) == "length" and stream[-1]["usage"]["completion_tokens"] == 6
    assert stream[-1]["x_llmload"]["ttft_s"] is None  # nothing was sent: no first token
    sync = httpx.post(url + CHAT, json=body(6, stream=False), timeout=10).json()
    assert sync["choices"][0]["message"]["content"] == ""
    assert sync["usage"]["completion_tokens"] == 6
