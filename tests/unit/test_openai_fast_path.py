"""The OpenAI adapters' content-only fast path (orjson) means exactly what the full path means.

Property: for any event — the usual text chunk, role/finish/usage/error chunks,
and JSON that orjson reads differently from ``json`` (big integers, NaN,
1E400, lone surrogates) — ``parse_event`` gives the same ``EventInfo`` (or the
same exception type and message) with the fast path on and with it off.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmload.loadtests.measure.adapters import _openai, openai_chat, openai_completions
from llmload.loadtests.measure.adapters.openai_chat import OpenAIChat
from llmload.loadtests.measure.adapters.openai_completions import OpenAICompletions

ADAPTERS = (OpenAIChat(), OpenAICompletions())


def _full_path_only(data: str) -> Any:
    raise ValueError("fast path off")


#: each adapter's reading of a choice, for the full path on its own
_CONTENT_OF = {OpenAIChat: openai_chat._delta, OpenAICompletions: openai_completions._choice_text}


def _outcome(adapter: Any, event: str | None, data: str, fast: bool) -> Any:
    """``parse_event`` (fast paths, the adapter's template as it stands) or the full path alone."""
    try:
        if fast:
            return ("ok", adapter.parse_event(event, data))
        return ("ok", _openai._parse_full(event, data, _CONTENT_OF[type(adapter)]))
    except Exception as exc:  # the timing core records these as protocol errors
        return ("raised", type(exc), str(exc))


_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
)
_text = st.one_of(st.text(max_size=6), st.sampled_from(["", " t1", "春", "\\ud800"]), _scalar)
_part = st.fixed_dictionaries(
    {},
    optional={
        "content": _text,
        "reasoning_content": _text,
        "reasoning": _text,
        "role": st.just("assistant"),
    },
)
_choice = st.fixed_dictionaries(
    {"index": st.just(0)},
    optional={
        "delta": st.one_of(_part, _scalar),
        "message": _part,
        "text": _text,
        "finish_reason": st.one_of(st.none(), st.sampled_from(["stop", "length", ""]), _scalar),
        "logprobs": st.none(),
    },
)
_chunk = st.fixed_dictionaries(
    {},
    optional={
        "id": st.text(max_size=8),
        "object": st.sampled_from(["chat.completion.chunk", "text_completion", "error"]),
        "created": _scalar,
        "choices": st.one_of(st.lists(st.one_of(_choice, _scalar), max_size=2), _scalar),
        "usage": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {}, optional={"completion_tokens": _scalar, "prompt_tokens": _scalar}
            ),
        ),
        "x_llmload": st.one_of(
            st.none(), st.dictionaries(st.sampled_from(["ttft_s", "e2e_s"]), _scalar)
        ),
        "error": st.one_of(
            st.none(), _scalar, st.fixed_dictionaries({"message": st.text(max_size=4)})
        ),
    },
)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


@given(chunk=_chunk, event=st.sampled_from([None, None, "error", "message"]))
def test_fast_path_means_what_the_full_path_means(chunk: dict[str, Any], event: str | None) -> None:
    data = _dumps(chunk)
    for adapter in ADAPTERS:
        assert _outcome(adapter, event, data, True) == _outcome(adapter, event, data, False)


@pytest.mark.parametrize(
    "data",
    [
        '{"choices":[{"index":0,"delta":{"content":" t1"}}]}',
        '{"choices":[{"index":0,"text":" t1"}]}',
        '{"choices":[{"delta":{"content":"x"}}],"created":123456789012345678901234567890}',
        '{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":123456789012345678901234}}',
        '{"choices":[{"delta":{"content":"x"}}],"x_llmload":{"ttft_s":1E400}}',
        '{"choices":[{"delta":{"content":"\\ud800"}}]}',
        '{"choices":[{"delta":{"content":NaN}}]}',
        '{"choices":[{"delta":{"content":"x"}}],"error":123456789012345678901234567890}',
        "123456789012345678901234567890",
        '{"choices":[{"delta":{"content":"x"}}]} trailing',
        "[DONE]",
        "",
    ],
)
def test_json_that_orjson_reads_differently_takes_the_full_path(data: str) -> None:
    for adapter in ADAPTERS:
        assert _outcome(adapter, None, data, True) == _outcome(adapter, None, data, False)


def test_the_usual_chunk_takes_the_fast_path() -> None:
    """A plain text chunk never reaches ``json`` (else the fast path would be dead code)."""
    chat = OpenAIChat()
    saved = _openai._decode_str
    _openai._decode_str = _full_path_only
    try:
        info = chat.parse_event(
            None,
            '{"choices":[{"index":0,"delta":{"content":" t1"},"finish_reason":null}],"usage":null}',
        )
        assert info.content == " t1" and not info.reasoning
        info = chat.parse_event(None, '{"choices":[{"delta":{"reasoning_content":"hm"}}]}')
        assert info.content == "hm" and info.reasoning
        with pytest.raises(ValueError, match="fast path off"):  # a finish chunk: the full path
            chat.parse_event(None, '{"choices":[{"delta":{},"finish_reason":"stop"}]}')
    finally:
        _openai._decode_str = saved


_piece = st.one_of(
    st.text(max_size=5),
    st.sampled_from(
        ["", " t1", "春天", 'say "hi"', "a\\b", "\n", "\x00", "\x7f", "\u2028", "\ufffd"]
    ),
)


@st.composite
def _stream(draw: Any) -> tuple[list[str], bool]:
    """One request's chunks as a server writes them: one skeleton, the text varying, and
    now and then another shape (role, finish, usage, a second choice, an extra key)."""
    chat = draw(st.booleans())
    ascii_only = draw(st.booleans())
    rid = draw(st.text(alphabet="abc0", max_size=4))
    extra = draw(st.sampled_from([{}, {"usage": None}, {"system_fingerprint": "fp"}]))
    events = []
    for piece in draw(st.lists(_piece, min_size=1, max_size=8)):
        key = draw(st.sampled_from(["content", "content", "reasoning_content", "role"]))
        part: dict[str, Any] = {key: piece}
        choice: dict[str, Any] = {"index": 0}
        if chat:
            choice["delta"] = part
        else:
            choice["text"] = piece
        choice["logprobs"] = None
        choice["finish_reason"] = draw(st.sampled_from([None, None, None, "stop"]))
        choices = [choice] + draw(
            st.sampled_from([[], [], [{"index": 1, "delta": {"content": "z"}}]])
        )
        obj = {"id": rid, "object": "chat.completion.chunk", "choices": choices, **extra}
        if draw(st.integers(0, 5)) == 0:
            obj["usage"] = {"completion_tokens": 3, "prompt_tokens": 1}
        events.append(json.dumps(obj, ensure_ascii=ascii_only, separators=(",", ":")))
    return events, chat


@given(stream=_stream())
def test_a_learnt_template_reads_what_the_full_path_reads(stream: tuple[list[str], bool]) -> None:
    events, chat = stream
    adapter = OpenAIChat() if chat else OpenAICompletions()
    for data in events:
        assert _outcome(adapter, None, data, True) == _outcome(adapter, None, data, False)


def test_a_template_reads_later_chunks_without_decoding() -> None:
    chat = OpenAIChat()
    head = '{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":'
    tail = '},"logprobs":null,"finish_reason":null}],"usage":null}'
    assert chat.parse_event(None, head + '" a"' + tail).content == " a"  # learns the skeleton
    saved = _openai._fast_loads, _openai._decode_str
    _openai._fast_loads = _openai._decode_str = _full_path_only
    try:
        assert chat.parse_event(None, head + '" b"' + tail).content == " b"
        assert chat.parse_event(None, head + '""' + tail).content == ""
        with pytest.raises(ValueError, match="fast path off"):  # an escape: decoded
            chat.parse_event(None, head + '"\\n"' + tail)
        with pytest.raises(ValueError, match="fast path off"):  # another request's id
            chat.parse_event(None, head.replace("c1", "c2") + '" b"' + tail)
    finally:
        _openai._fast_loads, _openai._decode_str = saved


def test_a_skeleton_whose_string_is_not_the_content_is_not_learnt() -> None:
    """The one compact ``"content":"`` is a nested value's, not the delta's: no template."""
    chat = OpenAIChat()
    data = '{"choices":[{"delta":{"content" : "a"}}],"meta":{"content":"a"}}'
    assert chat.parse_event(None, data).content == "a"
    assert chat._template.prefix == ""
    other = '{"choices":[{"delta":{"content" : "a"}}],"meta":{"content":"b"}}'
    assert chat.parse_event(None, other).content == "a"


def test_chunks_that_never_fit_back_learning_off() -> None:
    """A counter in every chunk: the skeleton never fits, and learning is tried ~log times."""
    chat = OpenAIChat()
    calls = [0]
    full = _openai._parse_full

    def counting(*args: Any) -> Any:
        calls[0] += 1
        return full(*args)

    _openai._parse_full = counting
    try:
        for i in range(300):
            data = f'{{"n":{i},"choices":[{{"delta":{{"content":"w{i % 7}"}}}}]}}'
            assert chat.parse_event(None, data).content == f"w{i % 7}"
    finally:
        _openai._parse_full = full
    assert 5 <= calls[0] <= 12  # 1, 2, 4, ..., 64, then every 64th of 300
