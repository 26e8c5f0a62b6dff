"""A batch of sequences sharing one left-padded KV cache (``DynamicCache``).

Rows join by a prefill whose cache is padded on the left to the batch's length
(or the batch is padded to theirs) and concatenated; rows leave by index; columns
that are padding in every remaining row are cut off the left.  The attention mask
hides the padding and explicit position ids keep each row's RoPE positions its own,
so a row decodes exactly as it would alone (checked in ``tests/unit``).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


def _pad_left(t: torch.Tensor, n: int, dim: int) -> torch.Tensor:
    if n == 0:
        return t
    shape = list(t.shape)
    shape[dim] = n
    return torch.cat([t.new_zeros(shape), t], dim=dim)


class Prefill:
    """Prompts being prefilled in column chunks into their own cache, before they join.

    Chunking lets the decode loop interleave a long prompt's prefill with decode
    steps for the running rows, instead of stalling them for the whole prompt.
    """

    def __init__(self, batch: PaddedBatch, prompts: list[list[int]]):
        self.batch = batch
        self.width = max(len(p) for p in prompts)
        ids = torch.zeros((len(prompts), self.width), dtype=torch.long)
        mask = torch.zeros((len(prompts), self.width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, self.width - len(p) :] = torch.tensor(p)
            mask[i, self.width - len(p) :] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        dev = batch.device
        self.ids, self.mask, self.pos = ids.to(dev), mask.to(dev), pos.to(dev)
        self.cache = DynamicCache(config=batch.model.config)
        self.done = 0  # columns already run

    @property
    def remaining(self) -> int:
        """Prompt tokens (padding included) still to run."""
        return (self.width - self.done) * int(self.ids.shape[0])

    def step(self, columns: int) -> torch.Tensor | None:
        """Run up to ``columns`` more columns; the last-position logits once complete."""
        end = min(self.width, self.done + max(1, columns))
        sl = slice(self.done, end)
        logits = self.batch._forward(
            self.ids[:, sl], self.mask[:, :end], self.pos[:, sl], self.cache
        )
        if self.done == 0 and any(type(layer) is not DynamicLayer for layer in self.cache.layers):
            raise RuntimeError(
                "this model's cache has sliding-window or other non-full-attention layers: "
                "--batching continuous supports full-attention models only; use --batching none"
            )
        self.done = end
        return logits if end == self.width else None


def _layers(cache: DynamicCache) -> list[Any]:
    """The cache's per-layer key/value holders (``DynamicLayer``: ``.keys``, ``.values``)."""
    return list(cache.layers)


class PaddedBatch:
    """The running batch's cache and mask; row order is the caller's row order."""

    def __init__(self, model: Any, cache_kwarg: str, device: torch.device):
        self.model, self.cache_kwarg, self.device = model, cache_kwarg, device
        self.cache: DynamicCache | None = None
        self.mask: torch.Tensor | None = None  # [rows, columns], 1 = real token

    def __len__(self) -> int:
        return 0 if self.mask is None else int(self.mask.shape[0])

    def clear(self) -> None:
        """Forget every row."""
        self.cache, self.mask = None, None

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: Any) -> Any:
        kwargs = {self.cache_kwarg: cache}
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos,
            use_cache=True,
            logits_to_keep=1,
            **kwargs,
        )
        return out.logits[:, -1, :]

    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        """Run the prompts (left-padded together), append them as rows; last-position logits."""
        job = self.start_prefill(prompts)
        logits = job.step(job.width)
        assert logits is not None
        self.merge(job)
        return logits

    def start_prefill(self, prompts: list[list[int]]) -> Prefill:
        """A prefill of ``prompts`` to run in chunks (``Prefill.step``), then ``merge``."""
        return Prefill(self, prompts)

    def merge(self, job: Prefill) -> None:
        """Append a finished prefill's rows to the batch."""
        assert job.done == job.width
        self._merge(job.cache, job.mask)

    def decode(self, tokens: list[int], positions: list[int]) -> torch.Tensor:
        """One step for every row: ``tokens[i]`` at ``positions[i]``; next-token logits."""
        assert self.mask is not None and self.cache is not None
        ids = torch.tensor(tokens, device=self.device).unsqueeze(1)
        pos = torch.tensor(positions, device=self.device).unsqueeze(1)
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(tokens), 1))], dim=1)
        return self._forward(ids, self.mask, pos, self.cache)

    def select(self, keep: list[int]) -> None:
        """Keep only these rows (in this order), then cut all-padding columns."""
        if not keep:
            self.clear()
            return
        if self.cache is None or self.mask is None or keep == list(range(len(self))):
            return
        idx = torch.tensor(keep, device=self.device)
        self.mask = self.mask.index_select(0, idx)
        lead = int((self.mask.sum(0) == 0).long().cumprod(0).sum())
        self.mask = self.mask[:, lead:]
        for layer in _layers(self.cache):
            layer.keys = layer.keys.index_select(0, idx)[:, :, lead:]
            layer.values = layer.values.index_select(0, idx)[:, :, lead:]

    def _merge(self, cache: DynamicCache, mask: torch.Tensor) -> None:
        if self.cache is None or self.mask is None:
            self.cache, self.mask = cache, mask
            return
        have, new = self.mask.shape[1], mask.shape[1]
        width = max(have, new)
        for old_layer, new_layer in zip(_layers(self.cache), _layers(cache), strict=True):
            old_layer.keys = torch.cat(
                [
                    _pad_left(old_layer.keys, width - have, 2),
                    _pad_left(new_layer.keys, width - new, 2),
                ]
            )
            old_layer.values = torch.cat(
                [
                    _pad_left(old_layer.values, width - have, 2),
                    _pad_left(new_layer.values, width - new, 2),
                ]
            )
        self.mask = torch.cat(
            [_pad_left(self.mask, width - have, 1), _pad_left(mask, width - new, 1)]
        )
