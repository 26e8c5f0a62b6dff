"""Request parsing: any JSON object either parses or becomes a 400/404 ApiError -- nothing else."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from target_server.errors import ApiError
from target_server.protocol import CHAT, COMPLETIONS, decode_json, parse_request

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
fields = st.sampled_from(
    ["model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature",
     "top_p", "stop", "seed", "n", "ignore_eos", "min_tokens", "stream", "stream_options"]
)  # fmt: skip
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant", "robot"]),
         "content": st.one_of(st.text(max_size=5), st.none(), json_values)}
    ),
    max_size=3,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    endpoint=st.sampled_from([CHAT, COMPLETIONS]),
    body=st.dictionaries(fields, json_values, max_size=6),
    msgs=st.none() | messages,
)
def test_any_body_parses_or_is_a_client_error(endpoint, body, msgs):
    if msgs is not None:
        body = {**body, "messages": msgs}
    try:
        parsed = parse_request(endpoint, body, "id", "served", 64)
    except ApiError as err:
        assert err.status in (400, 404)
        assert set(err.body()["error"]) == {"message", "type", "param", "code"}
        return
    gen = parsed.generation
    assert 1 <= gen.max_tokens <= 64 and 0 <= gen.min_tokens <= gen.max_tokens
    assert (gen.messages is None) != (gen.prompt is None)
    assert parsed.include_usage <= parsed.stream


@pytest.mark.parametrize("raw", [b"", b"nul", b"{", b"[]", b'"x"', b"\xff", b"1e999999"])
def test_decode_json_rejects_non_objects(raw):
    with pytest.raises(ApiError) as exc:
        decode_json(raw)
    assert exc.value.status == 400 and exc.value.code == "invalid_json"


def test_defaults_and_max_completion_tokens_precedence():
    p = parse_request(CHAT, {"messages": [{"role": "user", "content": [{"type": "text",
                      "text": "a"}, {"type": "text", "text": "b"}]}]}, "i", "m", 4096)  # fmt: skip
    assert p.generation.max_tokens == 256 and p.generation.messages == [
        {"role": "user", "content": "ab"}
    ]
    p = parse_request(CHAT, {"messages": [{"role": "user", "content": "x"}], "max_tokens": 9,
                             "max_completion_tokens": 5}, "i", "m", 4096)  # fmt: skip
    assert p.generation.max_tokens == 5
    p = parse_request(COMPLETIONS, {"prompt": ["only"], "stop": "x", "top_k": 5, "user": "u"},
                      "i", "m", 4096)  # fmt: skip
    assert p.generation.prompt == "only" and p.generation.stop == ("x",)
    assert p.generation.extra == {"top_k": 5}
