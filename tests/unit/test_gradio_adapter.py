"""The Gradio adapter through the real timing core, with fake chunks and a fake clock."""

from __future__ import annotations

import json

import pytest

from llmload.loadtests.measure.adapters.base import Prompt, follow_up_of
from llmload.loadtests.measure.adapters.gradio import (
    GradioAdapter,
    GradioEndpoint,
    choose_endpoint,
    text_of,
)
from llmload.loadtests.measure.timing import RecordMeta, StreamTimer


def _meta(mode: str = "stream") -> RecordMeta:
    return RecordMeta("r1", "p", "s", mode, "/gradio_api/call/chat", 0.0)  # type: ignore[arg-type]  # a test value outside the declared type, on purpose


def _event(name: str, data: object) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def test_build_and_follow_up_name_the_two_calls() -> None:
    a = GradioAdapter()
    prompt = Prompt("s", "p1", messages=[{"role": "user", "content": "写一首诗"}])
    call = a.build(prompt, mode="stream", model="m", options={"api_name": "/chat"})
    assert (call.method, call.path, call.json) == (
        "POST",
        "/gradio_api/call/chat",
        {"data": ["写一首诗"]},
    )
    hook = follow_up_of(a)
    assert hook is not None
    second = hook(b'{"event_id": "abc123"}')
    assert (second.method, second.path, second.stream) == (
        "GET",
        "/gradio_api/call/chat/abc123",
        True,
    )
    with pytest.raises(ValueError):
        hook(b"<html>not json</html>")


def test_multi_turn_prompt_sends_history_in_messages_format() -> None:
    prompt = Prompt(
        "s",
        "p2",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "more"},
        ],
    )
    call = GradioAdapter().build(prompt, mode="sync", model="m", options={})
    assert call.json == {
        "data": [
            "more",
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        ]
    }


def test_cumulative_updates_are_diffed_into_new_text() -> None:
    a = GradioAdapter()
    a.build(Prompt("s", "p", prompt="q"), mode="stream", model="m", options={})
    timer = StreamTimer(a, 0.0)
    timer.headers(0.01, 200)
    timer.feed(_event("heartbeat", None), 0.05)
    timer.feed(_event("generating", ["Hel", None]), 0.10)
    timer.feed(
        _event("generating", ["Hello", None]) + _event("generating", ["Hello wor", None]), 0.2
    )
    timer.feed(_event("generating", ["Hello world", None]), 0.3)
    timer.feed(_event("complete", ["Hello world", None]), 0.31)
    rec = timer.finish(0.32, _meta())
    assert rec.status == "ok"
    assert timer.text == "Hello world"
    assert rec.ttft_s == pytest.approx(0.10)
    assert rec.ttst_s == pytest.approx(0.2)
    assert rec.output_tokens == 4 and rec.token_source == "events"
    assert rec.itl_s == pytest.approx([0.1, 0.0, 0.1])


def test_delta_yielding_fn_counts_each_update_whole() -> None:
    a = GradioAdapter()
    a.build(Prompt("s", "p", prompt="q"), mode="stream", model="m", options={})
    infos = [a.parse_event("generating", json.dumps([t])) for t in ("ab", "cd", "ef")]
    assert [i.content for i in infos] == ["ab", "cd", "ef"]
    assert a.parse_event("complete", json.dumps(["ef"])).done


def test_message_dict_and_history_outputs() -> None:
    assert text_of({"role": "assistant", "content": "x"}) == "x"
    history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "answer"}]
    assert text_of(history) == "answer"
    assert text_of([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) == "ab"


def test_error_event_is_a_protocol_error() -> None:
    a = GradioAdapter()
    a.build(Prompt("s", "p", prompt="q"), mode="stream", model="m", options={})
    timer = StreamTimer(a, 0.0)
    timer.headers(0.01, 200)
    timer.feed(_event("generating", ["par", None]), 0.1)
    timer.feed(b'event: error\ndata: "model exploded"\n\n', 0.2)
    rec = timer.finish(0.2, _meta())
    assert rec.status == "protocol"
    assert rec.error is not None and "model exploded" in rec.error


def test_sync_body_is_the_whole_sse_stream() -> None:
    a = GradioAdapter()
    a.build(Prompt("s", "p", prompt="q"), mode="sync", model="m", options={})
    call = a.follow_up(b'{"event_id":"e"}')
    assert call.stream is False
    body = _event("generating", ["a"]) + _event("generating", ["ab"]) + _event("complete", ["abc"])
    timer = StreamTimer(a, 0.0)
    timer.headers(0.01, 200)
    timer.feed_body(body, 0.5)
    rec = timer.finish(0.5, _meta("sync"))
    assert rec.status == "ok" and timer.text == "abc"
    assert rec.ttft_s == pytest.approx(0.5)
    with pytest.raises(ValueError):
        a.parse_body(_event("generating", ["a"]))


def test_build_resets_state_between_requests() -> None:
    a = GradioAdapter()
    for _ in range(2):
        a.build(Prompt("s", "p", prompt="q"), mode="stream", model="m", options={})
        assert a.parse_event("generating", '["same start"]').content == "same start"


def _info(*endpoints: tuple[str, list[tuple[str, bool]]]) -> dict:
    named = {
        f"/{name}": {
            "parameters": [
                {"parameter_name": p, "parameter_has_default": has_default} for p, has_default in ps
            ],
            "returns": [],
        }
        for name, ps in endpoints
    }
    return {"named_endpoints": named, "unnamed_endpoints": {}}


def test_the_only_named_endpoint_is_the_chat() -> None:
    ep = choose_endpoint(_info(("predict_stream", [("message", False)])), None)
    assert (ep.api_name, ep.params, ep.required) == ("predict_stream", ("message",), ("message",))


def test_the_chat_interface_endpoint_is_chosen_among_several() -> None:
    info = _info(("lambda_14", [("x", False)]), ("respond", [("message", False)]))
    assert choose_endpoint(info, None).api_name == "respond"
    assert choose_endpoint(info, "/lambda_14").api_name == "lambda_14"


def test_a_wrong_or_ambiguous_name_lists_the_endpoints() -> None:
    info = _info(("predict_stream", [("message", False)]), ("other", [("message", False)]))
    with pytest.raises(
        ValueError,
        match=r"no API endpoint /chat; its endpoints: "
        r"/predict_stream, /other \(pass one with --api-name\)",
    ):
        choose_endpoint(info, "chat")
    with pytest.raises(ValueError, match="cannot tell which endpoint"):
        choose_endpoint(info, None)
    with pytest.raises(ValueError, match="named_endpoints"):
        choose_endpoint({"oops": 1}, None)


def test_v2_call_form_sends_named_parameters() -> None:
    a = GradioAdapter()
    prompt = Prompt(
        "s",
        "p",
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yo"},
            {"role": "user", "content": "more"},
        ],
    )
    opts = GradioEndpoint("predict_stream", ("message", "history")).options(v2=True)
    call = a.build(prompt, mode="stream", model="m", options=opts)
    assert call.path == "/gradio_api/call/v2/predict_stream"
    assert call.json == {
        "message": "more",
        "history": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    }
    assert a.endpoint == "/gradio_api/call/v2/predict_stream"
    hook = follow_up_of(a)
    assert hook is not None
    assert hook(b'{"event_id": "e1"}').path == "/gradio_api/call/v2/predict_stream/e1"
    # without parameter names (an older Gradio), the data-list form
    plain = GradioEndpoint("predict_stream").options(v2=True)
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    assert a.build(prompt, mode="stream", model="m", options=plain).json == {
        "data": ["more", history]
    }
