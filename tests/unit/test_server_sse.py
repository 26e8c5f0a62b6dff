"""Chunk encoding: pre-encoded content events equal what json.dumps would produce."""

from __future__ import annotations

import json

import pytest

from llmload.target_server.chunks import ChunkEncoder, error_event
from llmload.target_server.engine import TokenPiece
from llmload.target_server.schemas import CHAT, COMPLETIONS


@pytest.mark.parametrize("endpoint", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("usage", [True, False])
@pytest.mark.parametrize("text", [" hello", '"quoted" \\ back', "中文", "\n\t\u2028"])
def test_content_event_is_valid_json(endpoint, usage, text):
    enc = ChunkEncoder(endpoint, 'id-"1"', "m/ódel", usage)
    ev = enc.content(text)
    assert ev.startswith(b"data: ") and ev.endswith(b"\n\n")
    obj = json.loads(ev[6:])
    assert obj["id"] == 'id-"1"' and obj["model"] == "m/ódel"
    choice = obj["choices"][0]
    assert (choice["delta"]["content"] if endpoint == CHAT else choice["text"]) == text
    assert choice["finish_reason"] is None
    assert ("usage" in obj) is usage and obj.get("usage") is None


def test_finish_usage_and_body():
    enc = ChunkEncoder(CHAT, "x", "m", True)
    t = {"queue_s": 0.0, "ttft_s": 0.1, "e2e_s": 0.2}
    fin = json.loads(enc.finish("length", None)[6:])
    assert fin["choices"][0] == {
        "index": 0,
        "logprobs": None,
        "finish_reason": "length",
        "delta": {},
    }
    use = json.loads(enc.usage(3, 4, t)[6:])
    assert use["choices"] == [] and use["usage"]["total_tokens"] == 7 and use["x_llmload"] == t
    body = json.loads(enc.body([TokenPiece("h"), TokenPiece("i")], "stop", 1, 2, t))
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
    role = json.loads(enc.role()[6:])
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}


def test_malformed_is_not_json_and_error_event_is():
    enc = ChunkEncoder(COMPLETIONS, "x", "m", False)
    with pytest.raises(json.JSONDecodeError):
        json.loads(enc.malformed()[6:])
    err = json.loads(error_event("boom", "server_error")[6:])
    assert err["error"]["type"] == "server_error"


@pytest.mark.parametrize("endpoint", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("usage", [True, False])
@pytest.mark.parametrize("timings", [None, {"queue_s": 0.0, "ttft_s": 0.1, "itl_max_s": None}])
def test_role_and_finish_events_are_the_openai_objects(endpoint, usage, timings):
    """Put together from pre-encoded pieces, they parse to what OpenAI's chunks hold."""
    enc = ChunkEncoder(endpoint, 'id-"1"', "m/ódel", usage)
    common = {"id": 'id-"1"', "object": enc.object, "created": enc.created, "model": "m/ódel"}
    null_usage = {"usage": None} if usage else {}
    fin = enc.finish("length", timings)
    assert fin.startswith(b"data: ") and fin.endswith(b"\n\n")
    choice = {"index": 0, "logprobs": None, "finish_reason": "length"}
    choice.update({"delta": {}} if endpoint == CHAT else {"text": ""})
    extra = {"x_llmload": timings} if timings is not None else {}
    assert json.loads(fin[6:]) == {**common, "choices": [choice], **null_usage, **extra}
    role = enc.role()
    delta = {"role": "assistant", "content": ""}
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
    assert role.endswith(b"\n\n")
    assert json.loads(role[6:]) == {**common, "choices": [choice], **null_usage}


@pytest.mark.parametrize("text", [" hello", '"quoted" \\ back', "中文"])
def test_every_piece_kind_is_valid_json_in_vllm_shape(text):
    enc = ChunkEncoder(CHAT, "chatcmpl-abc", "m", True)

    def delta(kind):
        obj = json.loads(enc.piece(TokenPiece(text, kind=kind))[6:])
        assert obj["choices"][0]["finish_reason"] is None and obj["usage"] is None
        return obj["choices"][0]["delta"]

    assert delta("content") == {"content": text}
    assert delta("reasoning") == {"reasoning_content": text}
    assert delta("tool_name") == {
        "content": None,
        "tool_calls": [
            {
                "index": 0,
                "id": "call_abc",
                "type": "function",
                "function": {"name": text, "arguments": ""},
            }
        ],
    }
    assert delta("tool_args") == {
        "content": None,
        "tool_calls": [{"index": 0, "function": {"arguments": text}}],
    }
    # a completions stream has only text
    comp = ChunkEncoder(COMPLETIONS, "cmpl-abc", "m", False)
    assert (
        json.loads(comp.piece(TokenPiece(text, kind="reasoning"))[6:])["choices"][0]["text"] == text
    )
