"""Client-side token counts from a local tokenizer trained here (no hub)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from llmload.loadtests.measure.adapters import get_adapter
from llmload.loadtests.measure.timing import RecordMeta, StreamTimer
from llmload.loadtests.workload import tokencount
from tests.fixtures.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tok")
    return train_tokenizer(d)


def test_counts_match_the_tokenizer_itself(tok_dir: Path) -> None:
    counter = tokencount.load(tok_dir)
    reference = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    for text in ["hello world", "写一首诗", "quick sort 快速排序!"]:
        expected = len(reference.encode(text, add_special_tokens=False).ids)
        assert counter.count(text) == expected == counter(text)
    assert counter.count("") == 0
    assert tokencount.load(tok_dir / "tokenizer.json").count("hello world") == counter.count(
        "hello world"
    )


def test_slow_tokenizer_directory_loads_through_transformers(tok_dir: Path, tmp_path: Path) -> None:
    # vocab.json + merges.txt + tokenizer_config.json, no tokenizer.json (older checkpoints)
    Tokenizer.from_file(str(tok_dir / "tokenizer.json")).model.save(str(tmp_path))
    config = {"tokenizer_class": "GPT2Tokenizer"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    slow, fast = tokencount.load(tmp_path), tokencount.load(tok_dir)
    for text in ["hello world, streaming", "写一首关于春天的七言绝句", "quick sort 快速排序!"]:
        assert slow.count(text) == fast.count(text) > 0


def test_bad_paths_say_why(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        tokencount.load(tmp_path / "missing")
    (tmp_path / "weights.bin").write_bytes(b"\0")
    with pytest.raises(ValueError, match="tokenizer"):
        tokencount.load(tmp_path / "weights.bin")
    with pytest.raises(ValueError, match="no tokenizer"):
        tokencount.load(tmp_path)


def test_timing_core_records_client_count_next_to_usage(tok_dir: Path) -> None:
    counter = tokencount.load(tok_dir)
    pieces = ["hello", " world", ",", " streaming", " tokens"]
    timer = StreamTimer(get_adapter("openai-chat"), 0.0, tokenizer=counter)
    timer.headers(0.01, 200)
    for i, piece in enumerate(pieces):
        chunk = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        timer.feed(f"data: {json.dumps(chunk)}\n\n".encode(), 0.1 + i * 0.02)
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}}
    timer.feed(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode(), 0.3)
    rec = timer.finish(0.3, RecordMeta("r", "p", "s", "stream", "/v1/chat/completions", 0.0))
    assert rec.status == "ok"
    assert rec.client_output_tokens == counter.count("".join(pieces))
    assert rec.usage_output_tokens == 9 and rec.output_tokens == 9
    assert rec.tokens_per_event == [counter.count(p) for p in pieces]
