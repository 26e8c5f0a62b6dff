"""Request parsing: any JSON object either parses or becomes a 400/404 ApiError -- nothing else."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.target_server.errors import ApiError
from llmload.target_server.schemas import CHAT, COMPLETIONS, decode_json, parse_request

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
fields = st.sampled_from(
    [
        "model",
        "messages",
        "prompt",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "n",
        "ignore_eos",
        "min_tokens",
        "stream",
        "stream_options",
    ]
)
messages = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "system", "assistant", "robot"]),
            "content": st.one_of(st.text(max_size=5), st.none(), json_values),
        }
    ),
    max_size=3,
)


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


OK = b'"messages": [{"role": "user", "content": "hi"}]'


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"[" * 50_000, "nested too deeply"),
        (b'{"a":' * 20_000 + b"1" + b"}" * 20_000, "nested too deeply"),
        (b'{"max_tokens": ' + b"9" * 4301 + b", " + OK + b"}", "4301 digits"),
        (b'{"seed": -' + b"9" * 5000 + b", " + OK + b"}", "5000 digits"),
        (b'{"temperature": NaN, ' + OK + b"}", "NaN is not a JSON number"),
        (b'{"temperature": -Infinity, ' + OK + b"}", "-Infinity is not a JSON number"),
        (b'{"temperature": 1e400, ' + OK + b"}", "out of range"),
        (b'{"prompt": "a\\ud800b"}', "lone surrogate U+D800 in a string"),
        (b'{"\\udfff": 1, ' + OK + b"}", "lone surrogate U+DFFF"),
        (b'{"prompt": "\xed\xa0\x80"}', "not UTF-8"),
        (b'{"prompt": "\xc0\xaf"}', "not UTF-8"),
        (json.dumps({"prompt": "hi"}).encode("utf-16"), "not UTF-8"),
        (b'{"stream": false, "stream": true, ' + OK + b"}", "duplicate key 'stream'"),
        (b'{"messages": [{"role": "user", "role": "system"}]}', "duplicate key 'role'"),
    ],
)
def test_decode_json_refuses_what_a_lenient_decoder_raises_on_or_lets_through(raw, says):
    with pytest.raises(ApiError) as exc:
        decode_json(raw)
    assert exc.value.status == 400 and exc.value.code == "invalid_json"
    assert says in exc.value.message


@pytest.mark.parametrize(
    "raw",
    [
        # a valid surrogate pair, and an escaped backslash before "ud800"
        b'{"prompt": "\\ud83d\\ude00 and \\\\ud800 as text"}',
        b'\xef\xbb\xbf{"prompt": "a BOM is ignored"}',
        b'{"prompt": "nul \\u0000 and \\uffff are text"}',
        b'{"max_tokens": ' + b"9" * 4300 + b', "prompt": "x"}',
        b'{"logprobs": ' + b"[" * 200 + b"]" * 200 + b', "prompt": "x"}',
    ],
)
def test_decode_json_keeps_what_is_valid(raw):
    assert isinstance(decode_json(raw), dict)


def test_seed_and_engine_fields_are_typed_before_they_reach_an_engine():
    body = {"prompt": "x", "top_k": 5, "repetition_penalty": 1.1, "seed": 2**63 - 1}
    parsed = parse_request(COMPLETIONS, body, "id", "served", 64)
    assert parsed.generation.extra == {"top_k": 5, "repetition_penalty": 1.1}
    for field, value in (
        ("seed", 2**63),
        ("seed", -(2**63) - 1),
        ("top_k", "many"),
        ("min_p", [0.1]),
        ("no_repeat_ngram_size", 1.5),
    ):
        with pytest.raises(ApiError) as exc:
            parse_request(COMPLETIONS, {"prompt": "x", field: value}, "id", "served", 64)
        assert exc.value.status == 400 and exc.value.param == field, (field, value)


def test_defaults_and_max_completion_tokens_precedence():
    p = parse_request(
        CHAT,
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                }
            ]
        },
        "i",
        "m",
        4096,
    )
    assert p.generation.max_tokens == 256 and p.generation.messages == [
        {"role": "user", "content": "ab"}
    ]
    p = parse_request(
        CHAT,
        {
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 9,
            "max_completion_tokens": 5,
        },
        "i",
        "m",
        4096,
    )
    assert p.generation.max_tokens == 5
    p = parse_request(
        COMPLETIONS, {"prompt": ["only"], "stop": "x", "top_k": 5, "user": "u"}, "i", "m", 4096
    )
    assert p.generation.prompt == "only" and p.generation.stop == ("x",)
    assert p.generation.extra == {"top_k": 5}
