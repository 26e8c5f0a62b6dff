"""The Responses and Messages adapters through the timing core (fake clock).

The streams are the bundled server's own encoders' output (``target_server.
responses_api`` / ``messages_api``, whose shapes the official SDKs read:
``tests/integration/test_server_new_apis.py``), cut and edited for each bad
case the issue lists: an unknown event type, a stream that switches shape, one
that ends without its end marker, an error after content, an overloaded server.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmload.loadtests.measure.adapters import _named, _openai, get_adapter
from llmload.loadtests.measure.adapters._named import cut
from llmload.loadtests.measure.adapters.anthropic_messages import AnthropicMessages
from llmload.loadtests.measure.adapters.base import Prompt, api_key_header, sends_messages
from llmload.loadtests.measure.adapters.openai_responses import OpenAIResponses
from llmload.loadtests.options import ConnectionOptions
from llmload.loadtests.transport.target import Target
from llmload.target_server.engine import TokenPiece
from llmload.target_server.errors import ApiError
from llmload.target_server.messages_api import MessagesEncoder
from llmload.target_server.responses_api import ResponsesEncoder, ResponseStore
from tests.unit.timing_helpers import run_stream

TIMINGS = {"queue_s": 0.001, "ttft_s": 0.1, "e2e_s": 0.3}
R, C = "reasoning", "content"


def pieces(*kinds: str) -> list[TokenPiece]:
    return [TokenPiece(f" w{i}", kind=k) for i, k in enumerate(kinds)]  # type: ignore[arg-type]


def responses_stream(kinds: tuple[str, ...], reason: str = "stop") -> list[bytes]:
    """One server event per element: the opening, each piece's, and the closing events."""
    enc = ResponsesEncoder("resp_1", "m", [], ResponseStore())
    out = [enc.opening(7, None)]
    out += [enc.piece(p) for p in pieces(*kinds)]
    n = len(kinds)
    out.append(enc.closing(reason, 7, n, TIMINGS, kinds.count(R), 3))
    return out


def messages_stream(kinds: tuple[str, ...], reason: str = "stop") -> list[bytes]:
    enc = MessagesEncoder("msg_1", "m")
    out = [enc.opening(7, 3)]
    out += [enc.piece(p) for p in pieces(*kinds)]
    out.append(enc.closing(reason, 7, len(kinds), TIMINGS, kinds.count(R), 3))
    return out


def timed(events: list[bytes], start: float = 0.1, gap: float = 0.02) -> list[tuple[bytes, float]]:
    return [(e, start + i * gap) for i, e in enumerate(events)]


ADAPTERS = {"openai-responses": responses_stream, "anthropic-messages": messages_stream}


@pytest.mark.parametrize("protocol", ADAPTERS)
def test_reasoning_then_answer_timed_as_chat(protocol: str) -> None:
    events = ADAPTERS[protocol]((R, R, C, C, C))
    r = run_stream(timed(events), 0.3, adapter=get_adapter(protocol))
    assert r.status == "ok" and r.error is None and r.stream_end == "done"
    # the first piece's event is the 2nd event (index 1, after the opening)
    assert r.ttft_s == pytest.approx(0.12) and r.ttfo_s == pytest.approx(0.16)
    assert r.itl_s == pytest.approx([0.02] * 4)
    assert (r.output_tokens, r.token_source, r.prompt_tokens) == (5, "usage", 7)
    assert r.reasoning_tokens == 2 and r.cached_tokens == 3 and r.finish_reason == "stop"
    assert r.server_ttft_s == 0.1 and r.unknown_events == 0 and r.tool_calls == 0


@pytest.mark.parametrize("protocol", ADAPTERS)
def test_a_tool_call_is_timed_from_its_name(protocol: str) -> None:
    events = ADAPTERS[protocol](("tool_name", "tool_args", "tool_args"), "tool_calls")
    r = run_stream(timed(events), 0.3, adapter=get_adapter(protocol))
    assert r.status == "ok" and r.tool_calls == 1 and r.finish_reason == "tool_calls"
    assert r.ttft_s == pytest.approx(0.12) and r.ttfo_s == r.ttft_s and len(r.itl_s) == 2


@pytest.mark.parametrize("protocol", ADAPTERS)
def test_cut_short_by_max_tokens_is_ok_with_length(protocol: str) -> None:
    r = run_stream(timed(ADAPTERS[protocol]((C, C), "length")), 0.3, adapter=get_adapter(protocol))
    assert r.status == "ok" and r.finish_reason == "length"


def test_a_responses_stream_without_response_completed_is_a_named_disconnect() -> None:
    events = responses_stream((C, C))[:-1]
    r = run_stream(timed(events), 0.3, adapter=OpenAIResponses())
    assert r.status == "disconnect" and "response.completed" in (r.error or "")
    assert r.ttft_s is not None and len(r.itl_s) == 1  # what arrived is kept


@pytest.mark.parametrize("protocol", ADAPTERS)
def test_an_unknown_event_type_is_skipped_and_counted(protocol: str) -> None:
    events = ADAPTERS[protocol]((C, C))
    novel = b'event: response.novel_thing\ndata: {"type":"response.novel_thing","x":1}\n\n'
    if protocol == "anthropic-messages":
        novel = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        novel += b'"delta":{"type":"novel_delta","novel":"x"}}\n\n'
    events.insert(2, novel)
    r = run_stream(timed(events), 0.3, adapter=get_adapter(protocol))
    assert r.status == "ok" and r.unknown_events == 1 and r.output_tokens == 2
    assert len(r.itl_s) == 1  # the unknown event is not a token


@pytest.mark.parametrize("protocol", ADAPTERS)
def test_a_stream_that_switches_to_chat_chunks_is_protocol(protocol: str) -> None:
    events = ADAPTERS[protocol]((C, C))
    chat = b'data: {"object":"chat.completion.chunk","choices":[{"delta":{"content":"x"}}]}\n\n'
    events.insert(2, chat)
    r = run_stream(timed(events), 0.3, adapter=get_adapter(protocol))
    assert r.status == "protocol" and "without a 'type'" in (r.error or "")


def test_a_failed_response_after_content_is_protocol_with_its_message() -> None:
    enc = ResponsesEncoder("resp_1", "m", [], None)
    events = [enc.opening(7, None), enc.piece(TokenPiece("hi"))]
    events.append(enc.error_event(ApiError(500, "engine failure: boom", code="engine_error")))
    r = run_stream(timed(events), 0.3, adapter=OpenAIResponses())
    assert r.status == "protocol" and "engine failure: boom" in (r.error or "")
    assert r.ttft_s is not None and r.stream_end == "done"


def test_messages_error_after_content_is_protocol_and_overloaded_its_own_class() -> None:
    enc = MessagesEncoder("msg_1", "m")
    head = [enc.opening(7, None), enc.piece(TokenPiece("hi"))]
    api = head + [enc.error_event(ApiError(500, "internal error"))]
    r = run_stream(timed(api), 0.3, adapter=AnthropicMessages())
    assert r.status == "protocol" and "api_error: internal error" in (r.error or "")
    busy = head + [enc.error_event(ApiError(529, "Overloaded"))]
    r = run_stream(timed(busy), 0.3, adapter=AnthropicMessages())
    assert r.status == "overloaded" and "overloaded_error" in (r.error or "")
    assert r.ttft_s is not None  # the text before the error is kept


def test_http_529_is_overloaded_and_http_errors_keep_their_message() -> None:
    body = ApiError(529, "the server is at capacity").payload(anthropic=True)
    r = run_stream([(body, 0.05)], 0.06, adapter=AnthropicMessages(), http_status=529)
    assert r.status == "overloaded" and "at capacity" in (r.error or "")
    body = ApiError(400, "invalid request (input): Field required").payload()
    r = run_stream([(body, 0.05)], 0.06, adapter=OpenAIResponses(), http_status=400)
    assert r.status == "http_4xx" and "Field required" in (r.error or "")


@pytest.mark.parametrize("protocol", ADAPTERS)
def test_sync_bodies(protocol: str) -> None:
    enc = (
        ResponsesEncoder("resp_1", "m", [], None)
        if protocol == "openai-responses"
        else MessagesEncoder("msg_1", "m")
    )
    body = enc.body(pieces(R, C, C), "stop", 7, 3, TIMINGS, 2)
    info = get_adapter(protocol).parse_body(body)
    assert info.done and info.content == " w0 w1 w2" and info.answer == " w1 w2"
    assert info.reasoning and info.usage_output_tokens == 3 and info.usage_prompt_tokens == 7
    assert info.usage_cached_tokens == 2 and info.finish_reason == "stop"
    assert info.server == TIMINGS


def test_the_text_cut_agrees_with_decoding() -> None:
    for text in ("plain", " with space", "", "ü", "emoji 🙂", "tab\there", 'quote"', "back\\"):
        enc = ResponsesEncoder("resp_1", "m", [], None)
        enc.opening(7, None)
        event = enc.piece(TokenPiece(text)).split(b"data: ")[-1].strip().decode()
        got = cut(event, '"delta":"')
        assert got is None or got == json.loads(event)["delta"], text
        if text in ('quote"', "back\\", "tab\there"):
            assert got is None  # escaped: decoded in full
        else:
            assert got == text  # read without decoding
        info = OpenAIResponses().parse_event("response.output_text.delta", event)
        assert info.content == text
    assert cut('{"delta":"a","delta":"b"}', '"delta":"') is None  # twice: not vouched for
    assert cut('{"delta":"a"', '"delta":"') is None  # not closed


def _cut_by_find(data: str, key: str) -> str | None:
    """``cut`` as its docstring reads, step by step (the reading it replaced)."""
    i = data.find(key)
    if i < 0 or data[0] != "{" or data[-1] != "}" or data.find(key, i + 1) >= 0:
        return None
    start = i + len(key)
    end = data.find('"', start)
    if end < 0 or data[end + 1 : end + 2] not in (",", "}"):
        return None
    text = data[start:end]
    return None if "\\" in text or not text.isprintable() else text


_json_bits = st.sampled_from(['"delta":"', '"', "{", "}", ",", ":", "delta", "a", "ü", "\\", "\t"])


@given(st.lists(_json_bits, max_size=14).map("".join))
def test_the_text_cut_is_the_step_by_step_reading(data: str) -> None:
    for key in ('"delta":"', '"type":"text_delta","text":"'):
        assert cut(data, key) == _cut_by_find(data, key)
        assert cut("{" + data, key) == _cut_by_find("{" + data, key)


def test_a_messages_text_read_by_its_skeleton_agrees_with_decoding() -> None:
    """Text deltas after the first are read by the learnt skeleton; whatever does not fit
    it (an escape, another block, another spacing, a second delta) is read as before."""
    adapter = AnthropicMessages()
    texts = ["plain", "ü", "", 'quote"', "back\\", "tab\there", "emoji 🙂", "plain"]
    for index in (0, 1):
        for separators in ((",", ":"), (", ", ": ")):  # compact, or Python's (LiteLLM)
            for text in texts:
                delta = {"type": "text_delta", "text": text}
                obj = {"type": "content_block_delta", "index": index, "delta": delta}
                data = json.dumps(obj, ensure_ascii=False, separators=separators)
                assert adapter.parse_event("content_block_delta", data).content == text
    once = '{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"a"}}'
    assert adapter.parse_event("content_block_delta", once).content == "a"  # skeleton learnt
    twice = once[:-1] + ',"delta":{"type":"text_delta","text":"b"}}'  # the same two ends
    assert adapter.parse_event("content_block_delta", twice).content == "b"  # as json reads it


@pytest.mark.parametrize(
    "data",
    ["{}", '{"type":"ping"}', ' {"a":1}', '{"a":1} ', "[]", "{", '{"a":1}x', "\ufeff{}", "NaN"],
)
def test_the_event_decoder_agrees_with_json(data: str) -> None:
    try:
        expected: object = _openai.decode(data)
    except ValueError as exc:
        expected = str(exc)
    try:
        got: object = _named.decode(data)
    except ValueError as exc:
        got = str(exc)
    assert got == expected


def test_responses_request_and_chaining_by_previous_response_id() -> None:
    a = OpenAIResponses()
    history = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "1"},
        {"role": "user", "content": "two"},
    ]
    prompt = Prompt("s", "p", messages=history, max_tokens=9, turn=1, min_tokens=9)
    tools = ({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},)
    call = a.build(
        Prompt("s", "p", messages=history[:2], max_tokens=9, tools=tools),
        mode="stream",
        model="m",
        options={"temperature": 0.0},
    )
    body = call.json or {}
    assert call.path == "/v1/responses" and call.stream
    assert body["instructions"] == "be brief" and body["input"] == [history[1]]
    assert body["max_output_tokens"] == 9 and body["store"] is False
    assert body["tools"] == [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    assert body["temperature"] == 0.0
    # resend: the whole history again
    body = a.build(prompt, mode="stream", model="m", options={}).json or {}
    assert body["input"] == history[1:] and "previous_response_id" not in body
    # previous: after a finished response, only the new turn, naming it
    a.parse_body(ResponsesEncoder("resp_9", "m", [], None).body([], "stop", 1, 0, {}))
    body = a.build(prompt, mode="sync", model="m", options={"chain": "previous"}).json or {}
    assert body["previous_response_id"] == "resp_9" and body["store"] is True
    assert body["input"] == [history[3]] and body["min_tokens"] == 9


def test_messages_request_and_the_key_header(monkeypatch: pytest.MonkeyPatch) -> None:
    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "one"}]
    call = AnthropicMessages().build(
        Prompt("s", "p", messages=history, max_tokens=9, tool_choice="required"),
        mode="sync",
        model="m",
        options={"stop": "END", "ignore_eos": True},
    )
    body = call.json or {}
    assert call.headers["anthropic-version"] == "2023-06-01"
    assert body["system"] == "be brief" and body["messages"] == [history[1]]
    assert body["stop_sequences"] == ["END"] and "stop" not in body
    assert body["max_tokens"] == 9 and body["ignore_eos"] is True
    assert body["tool_choice"] == {"type": "any"}
    assert api_key_header("anthropic-messages") == "x-api-key"
    assert api_key_header("openai-responses") == "Authorization"
    assert sends_messages("anthropic-messages") and not sends_messages("openai-completions")
    monkeypatch.setenv("LLMLOAD_TEST_KEY", "sk-secret")
    opts = ConnectionOptions(
        target="http://127.0.0.1:1", protocol="anthropic-messages", api_key_env="LLMLOAD_TEST_KEY"
    )
    assert Target.from_options(opts).headers.get("x-api-key") == "sk-secret"
    assert "Authorization" not in Target.from_options(opts).headers
    assert os.environ["LLMLOAD_TEST_KEY"] == "sk-secret"


@pytest.mark.parametrize("protocol", ADAPTERS)
def test_a_gateways_done_marker_after_the_end_is_read(protocol: str) -> None:
    """LiteLLM's proxy ends a Responses stream with ``data: [DONE]`` too."""
    events = [*ADAPTERS[protocol]((C, C)), b"data: [DONE]\n\n"]
    r = run_stream(timed(events), 0.3, adapter=get_adapter(protocol))
    assert r.status == "ok" and r.stream_end == "done" and r.unknown_events == 0
