"""Choosing the next token: penalties, warpers and a per-request seeded sampler.

Both engines use the same ``Sampler``, so a request with a ``seed`` draws the same
tokens whichever engine runs it and whoever else is in the batch: every request
owns its random stream (``model.generate``'s global RNG is shared by all threads
and could not give that).  A draw is one inverse-CDF lookup with one uniform
number per row, so a whole batch samples in one softmax / cumsum / searchsorted
(``choose_rows``); only rows with top-k/top-p-style warpers take a per-row step.
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

from llmload.target_server.engine import EngineInputError


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
    gc: GenerationConfig,
    penalties: dict[str, float],
    prompt_len: int,
    eos_ids: list[int],
    min_tokens: bool = True,
) -> LogitsProcessorList:
    """Processors that look at the history (what ``generate`` would add, plus OpenAI's).

    ``min_tokens=False`` leaves EOS masking to the caller (the batched engine masks rows at once).
    """
    procs = LogitsProcessorList()
    try:
        if gc.repetition_penalty is not None and gc.repetition_penalty != 1.0:
            procs.append(RepetitionPenaltyLogitsProcessor(float(gc.repetition_penalty)))
        if gc.no_repeat_ngram_size:
            procs.append(NoRepeatNGramLogitsProcessor(int(gc.no_repeat_ngram_size)))
        if min_tokens and gc.min_new_tokens and eos_ids:
            procs.append(MinNewTokensLengthLogitsProcessor(prompt_len, gc.min_new_tokens, eos_ids))
    except ValueError as exc:
        raise EngineInputError(str(exc)) from None
    if penalties:
        procs.append(
            OpenAIPenalties(prompt_len, **{k.split("_")[0]: v for k, v in penalties.items()})
        )
    return procs


class Sampler:
    """Temperature + warpers + an inverse-CDF draw from the request's own generator.

    ``choose`` (one row) and ``choose_rows`` (a batch) give the same token for the
    same scores and generator state, so both engines sample alike.
    """

    def __init__(self, gc: GenerationConfig, seed: int):
        self.greedy = not gc.do_sample
        self.temperature: float | None = None
        self.warpers = LogitsProcessorList()
        # a Python stream: one uniform per token is all a draw needs, ~50x cheaper than torch.rand
        self.rng = random.Random(seed)
        if self.greedy:
            return
        try:
            if gc.temperature is not None and gc.temperature != 1.0:
                TemperatureLogitsWarper(float(gc.temperature))  # validates
                self.temperature = float(gc.temperature)
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

    def adjust(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """Temperature, then top-k / top-p / min-p / typical-p, on one row ([1, vocab])."""
        if self.temperature is not None:
            scores = scores / self.temperature
        if self.warpers:
            scores = self.warpers(cast(torch.LongTensor, input_ids), scores)
        return scores

    def uniform(self) -> float:
        """The next number in (0, 1] from this request's own stream."""
        return 1.0 - self.rng.random()

    def choose(self, input_ids: torch.Tensor, scores: torch.Tensor) -> int:
        """The next token for one row (``scores`` of shape [1, vocab])."""
        return choose_rows([self], [input_ids], scores)[0]


def choose_rows(
    samplers: list[Sampler], histories: list[torch.Tensor | None], scores: torch.Tensor
) -> list[int]:
    """Next tokens for a batch ([rows, vocab]): argmax for greedy rows, a seeded draw for others.

    Temperatures apply to all rows at once; warpers (top-k, top-p, ...) row by row;
    then one softmax, cumsum and searchsorted for every sampled row.
    """
    scores = scores.float()
    sampled = [i for i, s in enumerate(samplers) if not s.greedy]
    if not sampled:
        return [int(t) for t in scores.argmax(dim=-1).tolist()]
    rows = scores if len(sampled) == len(samplers) else scores[sampled]
    temps = [samplers[i].temperature or 1.0 for i in sampled]
    if any(t != 1.0 for t in temps):
        rows = rows / torch.tensor(temps, dtype=rows.dtype, device=rows.device).unsqueeze(1)
    for k, i in enumerate(sampled):
        if samplers[i].warpers:
            history = histories[i]
            ids = history if history is not None else torch.empty((1, 0), dtype=torch.long)
            if rows is scores:
                rows = rows.clone()
            rows[k : k + 1] = samplers[i].warpers(cast(torch.LongTensor, ids), rows[k : k + 1])
    cdf = torch.softmax(rows, dim=-1).cumsum(dim=-1)
    u = torch.tensor([samplers[i].uniform() for i in sampled], dtype=cdf.dtype, device=cdf.device)
    picks = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1)).squeeze(-1)
    picked = picks.clamp(max=cdf.shape[-1] - 1).tolist()
    if len(sampled) == len(samplers):
        return [int(t) for t in picked]
    out = scores.argmax(dim=-1).tolist()
    for i, token in zip(sampled, picked, strict=True):
        out[i] = token
    return [int(t) for t in out]


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
