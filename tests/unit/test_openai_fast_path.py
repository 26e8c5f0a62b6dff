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

from loadtests.adapters import _openai
from loadtests.adapters.openai_chat import OpenAIChat
from loadtests.adapters.openai_completions import OpenAICompletions

ADAPTERS = (OpenAIChat(), OpenAICompletions())


def _full_path_only(data: str) -> Any:
    raise ValueError("fast path off")


def _outcome(adapter: Any, event: str | None, data: str, fast: bool) -> Any:
    saved = _openai._fast_loads
    if not fast:
        _openai._fast_loads = _full_path_only
    try:
        return ("ok", adapter.parse_event(event, data))
    except Exception as exc:  # the timing core records these as protocol errors
        return ("raised", type(exc), str(exc))
    finally:
        _openai._fast_loads = saved


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
