"""``--dataset random``: prompts of an exact token length, and an exact output length.

vLLM ``bench serve``'s random dataset, made exact.  Each prompt is a run of
random *words* — lowercase vocabulary entries that cost exactly one token after
a space (``"Ġtable"``, ``"▁table"``) — so a prompt of ``n`` words is ``n``
tokens in the target's tokenizer (``--tokenizer PATH``, else the
embedded model's, built locally).  That the words add up is checked once per
tokenizer; where they do not, each text is re-encoded and corrected until the
count is exact.  Lengths are drawn uniformly from ``len * (1 +- range_ratio)``
per request, as vLLM does.  The output length is asked for with ``max_tokens``
and ``min_tokens`` both set to it (vLLM, SGLang and the bundled server honour
``min_tokens``; add ``--ignore-eos`` for servers that only know that).

Prompts are made per request from the user's seeded generator: the same seed
gives the same prompts, and no two requests share a prefix a server could cache.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from llmload.common.embedded import tokenizer_file
from llmload.loadtests.workload.items import Item
from llmload.loadtests.workload.tokencount import Codec, load_codec

SCENARIO = "random"
INPUT_LEN = 1024
OUTPUT_LEN = 128
_WORD = re.compile(r"[a-z]{2,12}")
#: re-encode / correct rounds before giving up on an exact length (never needed in tests)
_ROUNDS = 8


def default_codec() -> Codec:
    """The embedded model's tokenizer (trained and cached on first use; no torch needed)."""
    return load_codec(tokenizer_file())


def codec_for(tokenizer: str | None) -> Codec:
    """``--tokenizer PATH``'s codec, else the embedded model's (``default_codec``)."""
    return load_codec(tokenizer) if tokenizer else default_codec()


def vocabulary_words(codec: Codec) -> tuple[list[str], list[str]]:
    """Lowercase words that cost exactly one token after a space, and those that cost one alone.

    Works for byte-level BPE (``"Ġword"``) and SentencePiece-style (``"▁word"``)
    vocabularies alike: a word qualifies when ``"a word"`` is one token more than ``"a"``.
    """
    base = len(codec.encode("a"))
    seen: set[str] = set()
    words, leads = [], []
    for i in range(codec.vocab_size):
        w = codec.decode([i]).strip()
        if w in seen or not _WORD.fullmatch(w):
            continue
        seen.add(w)
        if len(codec.encode("a " + w)) == base + 1:
            words.append(w)
            if len(codec.encode(w)) == 1:
                leads.append(w)
    return words, leads


def length_range(length: int, ratio: float) -> tuple[int, int]:
    """``[floor(len*(1-r)), ceil(len*(1+r))]``, at least 1 (vLLM's bounds)."""
    # rounded first: 100 * 1.1 is 110.00000000000001 in binary, and its ceiling 111
    low = max(1, math.floor(round(length * (1.0 - ratio), 9)))
    return low, max(low, math.ceil(round(length * (1.0 + ratio), 9)))


@dataclass
class RandomPrompts:
    """Makes one exact-length ``Item`` per call from a caller's seeded generator."""

    codec: Codec
    input_len: int = INPUT_LEN
    output_len: int = OUTPUT_LEN
    range_ratio: float = 0.0

    @cached_property
    def words(self) -> tuple[list[str], list[str]]:
        words, leads = vocabulary_words(self.codec)
        if len(words) < 16:
            raise ValueError(
                f"tokenizer {self.codec.source!r} has {len(words)} single-token words; "
                "--dataset random needs a word-level vocabulary (give --tokenizer PATH)"
            )
        return words, leads or words

    @cached_property
    def additive(self) -> bool:
        """Does this tokenizer count a joined run of words as one token each (checked once)?

        Byte-level BPE and SentencePiece-style vocabularies split at the spaces,
        so the count is exact by construction and a prompt needs no re-encoding
        (a 1,024-token encode costs milliseconds on the load generator's loop).
        """
        rng = random.Random(0)
        return all(len(self.codec.encode(self._draw(n, rng))) == n for n in (1, 2, 33, 512))

    def _draw(self, n: int, rng: random.Random) -> str:
        words, leads = self.words
        return " ".join([rng.choice(leads), *rng.choices(words, k=n - 1)])

    def text(self, n: int, rng: random.Random, head: Sequence[str] = ()) -> str:
        """A text of exactly ``n`` tokens (``ValueError`` if the tokenizer will not allow it).

        Every word after the first costs one token and the first is one that
        costs one on its own; a tokenizer for which that does not add up
        (``additive`` False) gets each text re-encoded and its tail corrected.
        ``head``: words of this generator (``words``) the text starts with, kept as
        they are (a prefix other prompts share); the rest is drawn.
        """
        keep = len(head)
        if keep > n:
            raise ValueError(f"a {keep}-word head does not fit a {n}-token prompt")
        if self.additive:
            tail = [self._draw(n - keep, rng)] if n > keep else []
            return " ".join([*head, *tail])
        words, leads = self.words
        chosen = [*head, *(self._draw(n - keep, rng).split(" ") if n > keep else [])]
        for _ in range(_ROUNDS):
            text = " ".join(chosen)
            got = len(self.codec.encode(text))
            if got == n:
                return text
            if got > n and len(chosen) > max(1, keep):
                del chosen[max(1, keep, len(chosen) - (got - n)) :]
            elif got > n and not keep:
                chosen = [rng.choice(leads)]
            elif got < n:
                chosen += rng.choices(words, k=n - got)
            else:
                break
        raise ValueError(f"could not make a {n}-token prompt with {self.codec.source!r}")

    def __call__(self, rng: random.Random) -> Item:
        n_in = rng.randint(*length_range(self.input_len, self.range_ratio))
        n_out = rng.randint(*length_range(self.output_len, self.range_ratio))
        return Item(
            scenario=SCENARIO,
            item_id=f"{n_in}x{n_out}-{rng.getrandbits(32):08x}",
            prompt=self.text(n_in, rng),
            max_tokens=n_out,
            min_tokens=n_out,
        )

    def describe(self) -> dict[str, object]:
        """What ``run.json`` records about the generator."""
        return {
            "input_len": self.input_len,
            "output_len": self.output_len,
            "range_ratio": self.range_ratio,
            "tokenizer": self.codec.source,
        }
