"""``--dataset prefix``: prompts that share prefixes, as vLLM's ``prefix_repetition`` and SGLang's
generated shared prefix make them, with exact token lengths.

``--prefix-groups G`` groups, each a shared prefix of ``--prefix-len P`` tokens (a
system prompt or a document), seeded per group; every request draws a group —
uniformly, or Zipf-skewed with ``--prefix-skew S`` (group ``k`` of ``1..G`` with
weight ``1 / k**S``; 0 = uniform) — and appends ``--suffix-len Q`` tokens of its
own, asking for ``--output-len O`` tokens exactly (``max_tokens`` = ``min_tokens``).
A prompt is ``P + Q`` tokens in the target's tokenizer (``--tokenizer``, else the
embedded model's), made of the vocabulary words ``random_dataset.RandomPrompts``
uses: additive tokenizers are exact by construction, others are re-encoded and
their suffix corrected.  The prefix is the prompt's start (one text, as vLLM's
``prefix_repetition``), so a completions and a chat request share it alike.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from llmload.loadtests.workload.items import Item
from llmload.loadtests.workload.random_dataset import RandomPrompts

SCENARIO = "prefix"
#: vLLM ``prefix_repetition``'s defaults (num prefixes 10, prefix and suffix 256, output 128)
GROUPS, PREFIX_LEN, SUFFIX_LEN, OUTPUT_LEN = 10, 256, 256, 128


def zipf_weights(groups: int, skew: float) -> list[float]:
    """Group ``k`` (1-based) weighs ``1 / k**skew``; skew 0 is uniform."""
    return [1.0 / (k**skew) for k in range(1, groups + 1)]


@dataclass
class PrefixPrompts:
    """Makes one ``Item`` per call from a caller's seeded generator (a ``Pool``'s ``make``)."""

    make: RandomPrompts
    groups: int = GROUPS
    prefix_len: int = PREFIX_LEN
    suffix_len: int = SUFFIX_LEN
    output_len: int = OUTPUT_LEN
    skew: float = 0.0
    seed: int = 0
    _weights: list[float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.groups < 1 or self.prefix_len < 1 or self.suffix_len < 1 or self.output_len < 1:
            raise ValueError("--prefix-groups, --prefix-len, --suffix-len, --output-len: >= 1")
        if self.skew < 0:
            raise ValueError("--prefix-skew must be >= 0")
        self._weights = zipf_weights(self.groups, self.skew)

    @cached_property
    def prefixes(self) -> list[list[str]]:
        """Each group's prefix as words (``prefix_len`` tokens), seeded by group and seed."""
        words, leads = self.make.words
        out = []
        for g in range(self.groups):
            rng = random.Random(f"llmload-prefix:{self.seed}:{g}")
            out.append([rng.choice(leads), *rng.choices(words, k=self.prefix_len - 1)])
        return out

    def group_of(self, rng: random.Random) -> int:
        """A group drawn with the skew's weights."""
        if self.groups == 1:
            return 0
        return rng.choices(range(self.groups), self._weights)[0]

    def __call__(self, rng: random.Random) -> Item:
        g = self.group_of(rng)
        text = self.make.text(self.prefix_len + self.suffix_len, rng, head=self.prefixes[g])
        return Item(
            scenario=SCENARIO,
            item_id=f"g{g}-{rng.getrandbits(32):08x}",
            prompt=text,
            max_tokens=self.output_len,
            min_tokens=self.output_len,
        )

    def describe(self) -> dict[str, Any]:
        """What ``run.json`` records about the generator."""
        return {
            "groups": self.groups,
            "prefix_len": self.prefix_len,
            "suffix_len": self.suffix_len,
            "output_len": self.output_len,
            "skew": self.skew,
            "tokenizer": self.make.codec.source,
        }
