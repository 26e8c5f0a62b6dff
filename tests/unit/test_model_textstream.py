"""Incremental detokenisation: one piece per token, whole characters only, stop strings."""

from __future__ import annotations

from typing import Any

import pytest

from llmload.target_server.model.textstream import TextStream

TEXTS = [
    "Hello, world! The first token arrives early.",
    "首字延迟是从发送请求到收到第一个字的时间。",
    "def f(x):\n    return x * 2\n\nprint(f(3))",
    "mixed 中文 and English, 数字 42 — done.",
]


def _stream(tok: Any, ids: list[int], stops: tuple[str, ...] = ()) -> tuple[list[str], TextStream]:
    ts = TextStream(tok, stops)
    pieces = []
    for i in ids:
        pieces.append(ts.push(i))
        if ts.stopped:
            break
    pieces[-1] += ts.flush()
    return pieces, ts


@pytest.mark.parametrize("text", TEXTS)
def test_pieces_rebuild_the_text_one_per_token(embedded_tokenizer: Any, text: str) -> None:
    ids = embedded_tokenizer.encode(text)
    pieces, _ = _stream(embedded_tokenizer, ids)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)


def test_split_character_is_held_back_until_complete(embedded_tokenizer: Any) -> None:
    # byte-level BPE: a rare CJK character is several byte tokens; none may show U+FFFD
    text = "龘"
    ids = embedded_tokenizer.encode(text)
    assert len(ids) > 1  # the corpus does not contain it: it is split into bytes
    pieces, _ = _stream(embedded_tokenizer, ids)
    assert pieces[:-1] == [""] * (len(ids) - 1)
    assert pieces[-1] == text


def test_stop_string_across_tokens_cuts_the_text(embedded_tokenizer: Any) -> None:
    text = "def f(x):\n    return x * 2\n\nprint(f(3))"
    ids = embedded_tokenizer.encode(text)
    pieces, ts = _stream(embedded_tokenizer, ids, stops=("\n\n",))
    assert ts.stopped
    assert "".join(pieces) == text[: text.index("\n\n")]
    assert len(pieces) < len(ids)


def test_text_that_only_starts_a_stop_string_is_released(embedded_tokenizer: Any) -> None:
    text = "return x\nprint(1)"
    ids = embedded_tokenizer.encode(text)
    pieces, ts = _stream(embedded_tokenizer, ids, stops=("\n\n",))
    assert not ts.stopped
    assert "".join(pieces) == text


def test_the_fast_decoder_gives_the_wrappers_text(embedded_model: Any) -> None:
    """Random ids (special tokens included): the Rust decode path equals tokenizer.decode."""
    import random

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(embedded_model)
    assert TextStream(tok)._fast is not None  # the embedded tokenizer takes the fast path
    rng = random.Random(4)
    for _ in range(20):
        ids = [rng.randrange(len(tok)) for _ in range(rng.randint(1, 40))]
        pieces, _ = _stream(tok, ids)
        assert "".join(pieces) == tok.decode(ids, skip_special_tokens=True)
