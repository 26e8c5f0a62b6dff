"""Choosing the next token: penalties, warpers and a per-request seeded sampler.

Both engines use the same ``Sampler``, so a request with a ``seed`` draws the same
tokens whichever engine runs it and whoever else is in the batch: every request
owns its ``torch.Generator`` (``model.generate``'s global RNG is shared by all
threads and could not give that).
"""

from __future__ import annotations

import random
from typing import Any, cast

import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import (
    LogitsProcessor,
    LogitsProcessorList,
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from target_server.engine import EngineInputError


class OpenAIPenalties(LogitsProcessor):
    """OpenAI ``presence_penalty`` / ``frequency_penalty`` over the generated tokens."""

    def __init__(self, prompt_len: int, presence: float = 0.0, frequency: float = 0.0):
        self.prompt_len, self.presence, self.frequency = prompt_len, presence, frequency

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        generated = input_ids[:, self.prompt_len :]
        if generated.shape[1] == 0:
            return scores
        counts = torch.zeros_like(scores).scatter_add_(
            1, generated, torch.ones_like(generated, dtype=scores.dtype)
        )
        return scores - self.frequency * counts - self.presence * (counts > 0).to(scores.dtype)


def penalty_processors(
    gc: GenerationConfig, penalties: dict[str, float], prompt_len: int, eos_ids: list[int]
) -> LogitsProcessorList:
    """Processors that look at the history (what ``generate`` would add, plus OpenAI's)."""
    procs = LogitsProcessorList()
    try:
        if gc.repetition_penalty is not None and gc.repetition_penalty != 1.0:
            procs.append(RepetitionPenaltyLogitsProcessor(float(gc.repetition_penalty)))
        if gc.no_repeat_ngram_size:
            procs.append(NoRepeatNGramLogitsProcessor(int(gc.no_repeat_ngram_size)))
        if gc.min_new_tokens and eos_ids:
            procs.append(MinNewTokensLengthLogitsProcessor(prompt_len, gc.min_new_tokens, eos_ids))
    except ValueError as exc:
        raise EngineInputError(str(exc)) from None
    if penalties:
        procs.append(
            OpenAIPenalties(prompt_len, **{k.split("_")[0]: v for k, v in penalties.items()})
        )
    return procs


class Sampler:
    """Warpers + a draw from the request's own generator (or argmax when greedy)."""

    def __init__(self, gc: GenerationConfig, seed: int):
        self.greedy = not gc.do_sample
        self.warpers = LogitsProcessorList()
        self.generator = torch.Generator().manual_seed(seed)
        if self.greedy:
            return
        try:
            if gc.temperature is not None and gc.temperature != 1.0:
                self.warpers.append(TemperatureLogitsWarper(float(gc.temperature)))
            if gc.top_k:
                self.warpers.append(TopKLogitsWarper(int(gc.top_k)))
            if gc.top_p is not None and gc.top_p < 1.0:
                self.warpers.append(TopPLogitsWarper(float(gc.top_p)))
            if gc.min_p:
                self.warpers.append(MinPLogitsWarper(float(gc.min_p)))
            if gc.typical_p is not None and gc.typical_p < 1.0:
                self.warpers.append(TypicalLogitsWarper(float(gc.typical_p)))
        except ValueError as exc:
            raise EngineInputError(str(exc)) from None

    def choose(self, input_ids: torch.Tensor, scores: torch.Tensor) -> int:
        """The next token for one row (``scores`` of shape [1, vocab])."""
        if self.greedy:
            return int(scores[0].argmax())
        scores = self.warpers(cast(torch.LongTensor, input_ids), scores.float())
        probs = torch.softmax(scores[0], dim=-1)
        return int(torch.multinomial(probs.cpu(), 1, generator=self.generator))


class SamplingProcessor(LogitsProcessor):
    """Lets greedy ``generate`` sample with a ``Sampler``: all but the drawn token to -inf."""

    def __init__(self, sampler: Sampler):
        self.sampler = sampler

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        out = torch.full_like(scores, float("-inf"))
        for row in range(scores.shape[0]):
            out[row, self.sampler.choose(input_ids[row : row + 1], scores[row : row + 1])] = 0.0
        return out


def seed_for(request_seed: int | None, rng: random.Random) -> int:
    """The request's seed, or a draw from the engine's seeded stream."""
    return int(request_seed) if request_seed is not None else rng.getrandbits(63)


def describe(gc: GenerationConfig) -> dict[str, Any]:
    """The non-default fields of ``gc`` (for logs)."""
    return {k: v for k, v in gc.to_diff_dict().items() if k != "transformers_version"}
