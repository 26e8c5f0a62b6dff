"""Keep each request inside the target's context length: prompt + ``max_tokens`` <= the limit.

vLLM answers HTTP 400 before any token to a request whose prompt plus
``max_tokens`` exceeds the served ``max_model_len``; a default scenario must not
fail by design against a short-context deployment.  When the target tells its
context length (``loadtests.transport.discovery``), ``ContextFit.fit`` trims a prompt's
``max_tokens`` to what is left, or skips the prompt when fewer than
``MIN_OUTPUT_TOKENS`` would be left.  Both are counted and said once per run.

Prompt tokens are counted with ``--tokenizer`` when given (the messages'
text plus a per-message allowance for the chat template), else *estimated
conservatively*: one token per ``ASCII_CHARS_PER_TOKEN`` ASCII characters and
``OTHER_CHAR_TOKENS`` per other character, plus ``ESTIMATE_MARGIN``.  Production tokenizers (100k+
vocabularies) produce about half that for English, Chinese or code; the
bundled embedded model's 2,048-entry vocabulary, the worst case measured, up
to as many (tests/unit/test_fit.py checks the built-in prompts against it).  So
an estimate errs towards trimming, never towards a 400; ``--tokenizer`` makes
the count exact.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmload.loadtests.measure.adapters.base import Prompt

ASCII_CHARS_PER_TOKEN = 1.5
OTHER_CHAR_TOKENS = 2
#: headroom on top of the estimate
ESTIMATE_MARGIN = 1.1
#: chat-template tokens per message (role markers) and per request (default system prompt)
PER_MESSAGE_TOKENS = 8
PER_REQUEST_TOKENS = 24
#: a prompt that would leave fewer output tokens than this (or its max_tokens) is skipped
MIN_OUTPUT_TOKENS = 16
CACHE_MAX = 4096


def estimate_tokens(text: str) -> int:
    """A conservative token count of ``text`` without a tokenizer."""
    ascii_chars = len(text) if text.isascii() else len(text.encode("ascii", "ignore"))
    tokens = ascii_chars / ASCII_CHARS_PER_TOKEN + OTHER_CHAR_TOKENS * (len(text) - ascii_chars)
    return math.ceil(ESTIMATE_MARGIN * tokens)


def _texts(prompt: Prompt) -> list[str]:
    if prompt.messages is not None:
        out = []
        for m in prompt.messages:
            content: Any = m.get("content")
            if isinstance(content, list):  # OpenAI content parts
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            out.append(str(content or ""))
        return out
    return [prompt.prompt or ""]


#: prompts drawn, all skipped, after which a phase with a request budget gives up: it
#: could never send its requests (a user draws 20 per try, a try every 0.5 s + pacing)
NOTHING_FITS_AFTER = 400


@dataclass
class ContextFit:
    """Trims or skips prompts for one context ``limit``; counts what it did."""

    limit: int
    count: Callable[[str], int] | None = None
    checked: int = 0
    trimmed: int = 0
    skipped: int = 0
    #: tokens per message text: prompts repeat, and a tokenizer costs ~1 ms per long prompt
    _counts: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def method(self) -> str:
        return "tokenizer" if self.count is not None else "estimate"

    def prompt_tokens(self, prompt: Prompt) -> int:
        """Prompt tokens as the server will see them (upper bound when estimated)."""
        texts = _texts(prompt)
        return sum(map(self._tokens, texts)) + PER_MESSAGE_TOKENS * len(texts) + PER_REQUEST_TOKENS

    def _tokens(self, text: str) -> int:
        n = self._counts.get(text)
        if n is None:
            if len(self._counts) >= CACHE_MAX:
                self._counts.clear()
            n = self._counts[text] = (self.count or estimate_tokens)(text)
        return n

    def fit(self, prompt: Prompt) -> Prompt | None:
        """``prompt`` as it can be sent (``max_tokens`` trimmed), or None to skip it."""
        self.checked += 1
        room = self.limit - self.prompt_tokens(prompt)
        if room >= prompt.max_tokens:
            return prompt
        if room < min(MIN_OUTPUT_TOKENS, prompt.max_tokens):
            self.skipped += 1
            return None
        self.trimmed += 1
        min_tokens = prompt.min_tokens if prompt.min_tokens and prompt.min_tokens <= room else None
        return dataclasses.replace(prompt, max_tokens=room, min_tokens=min_tokens)

    @property
    def nothing_fits(self) -> bool:
        """Every one of at least ``NOTHING_FITS_AFTER`` prompts drawn was skipped."""
        return self.checked >= NOTHING_FITS_AFTER and self.skipped == self.checked

    def counts(self) -> dict[str, int]:
        """What it did so far (a distributed worker sends these to the master)."""
        return {"checked": self.checked, "trimmed": self.trimmed, "skipped": self.skipped}

    def add(self, counts: dict[str, int]) -> None:
        """Add another process's ``counts()`` to these."""
        self.checked += int(counts.get("checked", 0))
        self.trimmed += int(counts.get("trimmed", 0))
        self.skipped += int(counts.get("skipped", 0))

    def describe(self) -> dict[str, Any]:
        """What ``run.json`` records (``context_fit``)."""
        return {
            "context_limit": self.limit,
            "prompt_tokens": self.method,
            "checked": self.checked,
            "trimmed": self.trimmed,
            "skipped": self.skipped,
        }

    def summary_line(self) -> str | None:
        """The one line a run prints about it (None when nothing was trimmed or skipped)."""
        if not self.trimmed and not self.skipped:
            return None
        return (
            f"context length {self.limit} tokens: {self.skipped} of {self.checked} prompts "
            f"skipped (no room for an answer), {self.trimmed} sent with max_tokens trimmed to "
            f"fit (prompt tokens by {self.method})"
        )
