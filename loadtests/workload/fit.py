"""Keep each request inside the target's context length: prompt + ``max_tokens`` <= the limit.

vLLM answers HTTP 400 before any token to a request whose prompt plus
``max_tokens`` exceeds the served ``max_model_len``; a default scenario must not
fail by design against a short-context deployment.  When the target tells its
context length (``loadtests.transport.discovery``), ``ContextFit.fit`` trims a prompt's
``max_tokens`` to what is left, or skips the prompt when fewer than
``MIN_OUTPUT_TOKENS`` would be left.  Both are counted and said once per run.

Prompt tokens are counted, in this order of preference:

1. by the target itself (``remote``, a ``PromptCounter``: vLLM's, SGLang's or TGI's
   ``/tokenize``, ``loadtests.transport.tokenize``), once per distinct prompt, the
   served model's tokenizer and chat template — exact;
2. with ``--tokenizer`` (the messages' text plus a per-message allowance for the
   chat template);
3. else *bounded*: one token per UTF-8 byte, plus the same allowance.  A byte-level
   BPE (GPT-2, Llama 3, Qwen, the embedded model) never makes more tokens than
   bytes, whatever its vocabulary, and a SentencePiece model with byte fallback
   about as many; production vocabularies make 3-4 times fewer for English, so the
   bound trims or skips too much, never too little (it used to be an estimate per
   character, which a small vocabulary exceeded: HTTP 400s against vLLM).

A prompt's images (``--images``) are counted on top, whichever way the text was: by
the rule the bundled server charges them (``llmload.common.images``: one token per
28×28-pixel patch of a PNG, Qwen2-VL's; 256 for an image it cannot size), since no
``/tokenize`` is sent them.  Other vision models count differently (a fixed 576 for
LLaVA-1.5, tiles for others): the fit is as good as that rule is for the served model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from llmload.common.images import tokens_of_url
from llmload.loadtests.measure.adapters.base import Prompt

#: chat-template tokens per message (role markers) and per request (default system prompt)
PER_MESSAGE_TOKENS = 8
PER_REQUEST_TOKENS = 24
#: a prompt that would leave fewer output tokens than this (or its max_tokens) is skipped
MIN_OUTPUT_TOKENS = 16
CACHE_MAX = 4096


def estimate_tokens(text: str) -> int:
    """An upper bound of ``text``'s tokens without a tokenizer: its UTF-8 bytes."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class PromptCounter(Protocol):
    """Counts a whole prompt's tokens elsewhere (the target: ``loadtests.transport.tokenize``).

    Returns None when it cannot count this prompt (the prompt is then counted here).
    """

    #: whether the count includes the chat template (else the allowance is added)
    templated: bool

    def __call__(self, prompt: Prompt) -> int | None: ...


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
    #: the target's own count, preferred when it answers
    remote: PromptCounter | None = None
    #: tokens per message text: prompts repeat, and a tokenizer costs ~1 ms per long prompt
    _counts: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def method(self) -> str:
        if self.remote is not None:
            return "target"
        return "tokenizer" if self.count is not None else "estimate"

    def prompt_tokens(self, prompt: Prompt) -> int:
        """Prompt tokens as the server will see them (upper bound when estimated), its
        images included."""
        texts = _texts(prompt)
        allowance = PER_MESSAGE_TOKENS * len(texts) + PER_REQUEST_TOKENS
        images = sum(map(tokens_of_url, prompt.images))
        if self.remote is not None:
            n = self.remote(prompt)
            if n is not None:
                return images + (n if self.remote.templated else n + allowance)
        return images + sum(map(self._tokens, texts)) + allowance

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
