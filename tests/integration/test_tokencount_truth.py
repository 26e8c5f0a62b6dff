"""Token truth: ``--tokenizer`` counts on the client, next to the server's usage, in a real run.

The synthetic engine emits one word of its ``VOCAB`` per token, so a word-level
tokenizer over that vocabulary *is* the model's tokenizer (client counts equal
usage), and the byte-level one trained on other text is not (the report flags it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, models, pre_tokenizers

from llmload.target_server.synthetic import VOCAB
from tests.fixtures.drive import loadtest
from tests.fixtures.tokenizer import train_tokenizer

TOKENS = 12
ARGS = (
    "--modes",
    "stream",
    "--users",
    "2",
    "--spawn-rate",
    "10",
    "--pacing",
    "0.1s",
    "--duration",
    "1.5s",
    "--max-tokens",
    str(TOKENS),
    "--ignore-eos",
)


def _engine_tokenizer(directory: Path) -> Path:
    """A word-level tokenizer whose tokens are exactly the synthetic engine's."""
    vocab = {"[UNK]": 0, **{w.strip(): i + 1 for i, w in enumerate(VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    directory.mkdir(parents=True)
    tok.save(str(directory / "tokenizer.json"))
    return directory


def test_matching_tokenizer_agrees_with_usage_and_a_wrong_one_is_flagged(
    start_server: Callable[..., Any], tmp_path: Path
) -> None:
    server = start_server(ttft_ms=30, itl_ms=5)
    args = ("--target", server.url, *ARGS)

    right = loadtest(
        tmp_path / "right", *args, "--tokenizer", str(_engine_tokenizer(tmp_path / "t1"))
    )
    phase = right["phases"]["stream"]
    assert phase["ok"] >= 4 and phase["ok"] == phase["count"]
    assert phase["token_count_mismatch"] == {"compared": phase["ok"], "mismatched": 0, "rate": 0.0}
    assert phase["output_tokens"]["p50"] == TOKENS
    # one token per event: ITL per token equals ITL per event
    assert phase["itl_per_token_ms"]["p50"] == phase["itl_ms"]["p50"]
    assert phase["diagnostics"] == []

    wrong = loadtest(
        tmp_path / "wrong", *args, "--tokenizer", str(train_tokenizer(tmp_path / "t2"))
    )
    phase = wrong["phases"]["stream"]
    assert phase["token_count_mismatch"]["rate"] == 1.0
    assert phase["output_tokens"]["p50"] == TOKENS  # usage still decides output_tokens
    assert [d["code"] for d in phase["diagnostics"]] == ["token_count_mismatch"]
    # the byte-level tokenizer splits words: several tokens per event, so per-token ITL is shorter
    assert phase["itl_per_token_ms"]["p50"] < phase["itl_ms"]["p50"]
