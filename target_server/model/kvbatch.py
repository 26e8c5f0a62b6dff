"""The running batch's KV cache: one pre-allocated slot per request, positions per row.

``SlotCache`` is a transformers-compatible cache object (the model's attention
layers call ``cache.update(keys, values, layer_idx)`` on it, whatever the
architecture) over buffers shaped ``[slots, kv_heads, columns, head_dim]``
per layer.  Row *i* of the batch owns slot *i*; its token at position *p* lives in
column *p*, so a decode step writes one column per row (``scatter_``) into
memory that is already there — no ``torch.cat`` of the whole cache per token,
no left padding, nothing to cut when rows leave.  Buffers grow by doubling
(rows up to the batch limit, columns by at least 256) and are reused after that.

The model still runs its own forward (``model(input_ids, position_ids,
attention_mask, cache)``: the code path of every Hugging Face checkpoint); this
module only hands it explicit per-row position ids and a ready 4-D boolean mask
(``{"full_attention": mask}``, which the model uses as is instead of building
masks each step).  Column *c* is visible to a query at position *p* of the same
row when ``c <= p``; what lies beyond a row's length is never visible, and the
next step overwrites it before it could be.

A newcomer's prompt is prefilled in column chunks (``Prefill``) in its own small
``SlotCache`` (prompts of a group left-padded together), then copied into free
slots of the running batch (``SlotBatch.merge``); every row then decodes exactly
as it would alone (checked in ``tests/unit/test_model_kvbatch.py``).
"""

from __future__ import annotations

from typing import Any

import torch

#: columns added at least when the cache grows (then doubling)
GROW_COLUMNS = 256


def _kv_shape(config: Any) -> tuple[int, int, int]:
    """(layers, kv heads, head dim) from a model config."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = int(cfg.num_attention_heads)
    kv = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    return int(cfg.num_hidden_layers), kv, head_dim


def check_full_attention(config: Any) -> None:
    """Refuse models whose layers are not all full attention (sliding window, linear, ...)."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    kinds = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"}:
        raise RuntimeError(
            f"this model has {sorted(kinds - {'full_attention'})} layers: --batching continuous "
            "supports full-attention models only; use --batching none"
        )


class SlotCache:
    """Per-layer key/value buffers, one row per slot (see the module docstring).

    Before each forward the caller ``bind``s the rows it runs (a ``slice`` of slots),
    the columns its new tokens go to (``[rows, new]``) and the width attention reads.
    """

    is_compileable = False

    def __init__(
        self, config: Any, rows: int, columns: int, device: torch.device, dtype: torch.dtype
    ):
        self.layers, self.kv_heads, self.head_dim = _kv_shape(config)
        self.device, self.dtype = device, dtype
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.rows = slice(0, 0)
        self.columns: torch.Tensor | None = None
        self.contiguous_from: int | None = None  # columns[:, k] == contiguous_from + k
        self.width = 0
        self._alloc(rows, columns)

    @property
    def capacity(self) -> tuple[int, int]:
        """(slots, columns) allocated."""
        return (int(self.keys[0].shape[0]), int(self.keys[0].shape[2])) if self.keys else (0, 0)

    def _alloc(self, rows: int, columns: int) -> None:
        shape = (rows, self.kv_heads, columns, self.head_dim)
        old_k, old_v = self.keys, self.values
        dev, dt = self.device, self.dtype
        self.keys = [torch.zeros(shape, device=dev, dtype=dt) for _ in range(self.layers)]
        self.values = [torch.zeros_like(k) for k in self.keys]
        for new, old in zip(self.keys + self.values, old_k + old_v, strict=False):
            r, c = min(rows, old.shape[0]), min(columns, old.shape[2])
            new[:r, :, :c] = old[:r, :, :c]

    def ensure(self, rows: int, columns: int) -> None:
        """Grow (copying what is there) so ``rows`` slots of ``columns`` columns fit."""
        have_r, have_c = self.capacity
        if rows <= have_r and columns <= have_c:
            return
        new_r = have_r if rows <= have_r else max(rows, 2 * have_r)
        new_c = have_c if columns <= have_c else max(columns, 2 * have_c, have_c + GROW_COLUMNS)
        self._alloc(new_r, new_c)

    def bind(self, rows: slice, columns: torch.Tensor | int, width: int) -> None:
        """The next forward runs slots ``rows``; new tokens go to ``columns``; reads ``width``.

        ``columns``: an int ``c`` when every row's new tokens go to ``c, c+1, ...``,
        else a ``[rows, new]`` tensor.
        """
        self.rows, self.width = rows, width
        if isinstance(columns, int):
            self.contiguous_from, self.columns = columns, None
        else:
            self.contiguous_from, self.columns = None, columns

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        *_: Any,
        **__: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this forward's keys/values, return the bound rows' first ``width`` columns."""
        k, v = self.keys[layer_idx][self.rows], self.values[layer_idx][self.rows]
        if self.contiguous_from is not None:
            c = self.contiguous_from
            k[:, :, c : c + key_states.shape[2]] = key_states
            v[:, :, c : c + key_states.shape[2]] = value_states
        else:
            assert self.columns is not None
            idx = self.columns[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])
            k.scatter_(2, idx, key_states)
            v.scatter_(2, idx, value_states)
        return k[:, :, : self.width], v[:, :, : self.width]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.width

    def move_rows(self, src: list[int], dst: list[int], width: int) -> None:
        """Copy slots ``src`` onto slots ``dst`` (first ``width`` columns)."""
        if not src:
            return
        s = torch.tensor(src, device=self.device)
        d = torch.tensor(dst, device=self.device)
        for buf in self.keys + self.values:
            buf[:, :, :width].index_copy_(0, d, buf[:, :, :width].index_select(0, s))


class Prefill:
    """Prompts being prefilled in column chunks into their own cache, before they join.

    Chunking lets the decode loop interleave a long prompt's prefill with decode
    steps for the running rows, instead of stalling them for the whole prompt.
    """

    def __init__(self, batch: SlotBatch, prompts: list[list[int]]):
        self.batch = batch
        self.lengths = [len(p) for p in prompts]
        self.width = max(self.lengths)
        rows = len(prompts)
        ids = torch.zeros((rows, self.width), dtype=torch.long)
        pad = torch.tensor([self.width - n for n in self.lengths])
        for i, p in enumerate(prompts):
            ids[i, self.width - len(p) :] = torch.tensor(p)
        dev = batch.device
        cols = torch.arange(self.width)
        self.ids = ids.to(dev)
        self.pad = pad.to(dev)
        self.pos = (cols.unsqueeze(0) - pad.unsqueeze(1)).clamp(min=0).to(dev)
        self.cols = cols.to(dev)
        self.cache = SlotCache(batch.model.config, rows, self.width, dev, batch.dtype)
        self.done = 0  # columns already run

    @property
    def remaining(self) -> int:
        """Prompt tokens (padding included) still to run."""
        return (self.width - self.done) * int(self.ids.shape[0])

    def step(self, columns: int) -> torch.Tensor | None:
        """Run up to ``columns`` more columns; the last-position logits once complete."""
        start = self.done
        end = min(self.width, start + max(1, columns))
        rows = int(self.ids.shape[0])
        q, kv = self.cols[start:end], self.cols[:end]
        # row i sees key column c from query column q when pad_i <= c <= q; a padding
        # query sees itself (an all-masked row would make NaNs that 0-weights cannot hide)
        c, qq = kv.view(1, 1, -1), q.view(1, -1, 1)
        mask = ((c <= qq) & (c >= self.pad.view(-1, 1, 1))) | (c == qq)
        self.cache.bind(slice(0, rows), start, end)
        logits = self.batch.forward(
            self.ids[:, start:end], self.pos[:, start:end], mask.unsqueeze(1), self.cache
        )
        self.done = end
        return logits if end == self.width else None


class SlotBatch:
    """The running batch: its ``SlotCache``, each row's next position; row i = slot i."""

    def __init__(self, model: Any, cache_kwarg: str, device: torch.device, rows: int = 8):
        check_full_attention(model.config)
        self.model, self.cache_kwarg, self.device = model, cache_kwarg, device
        # the model's compute dtype (HF's ``model.dtype``: its first floating-point
        # parameter, so a 4-bit quantised model still gives bf16/fp16 here)
        self.dtype = getattr(model, "dtype", None) or next(model.parameters()).dtype
        self.cache = SlotCache(model.config, rows, GROW_COLUMNS, device, self.dtype)
        self.n = 0
        self.lengths: list[int] = []  # tokens in each row's cache (= next position)
        self.pos = torch.zeros(rows, dtype=torch.long, device=device)
        self._cols = torch.arange(GROW_COLUMNS, device=device)

    def __len__(self) -> int:
        return self.n

    def clear(self) -> None:
        """Forget every row (the buffers stay allocated)."""
        self.n, self.lengths = 0, []

    def forward(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, cache: Any) -> Any:
        """The model's own forward with explicit positions and mask; last-position logits."""
        kwargs = {self.cache_kwarg: cache}
        out = self.model(
            input_ids=ids,
            attention_mask={"full_attention": mask},
            position_ids=pos,
            use_cache=True,
            logits_to_keep=1,
            **kwargs,
        )
        return out.logits[:, -1, :]

    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        """Run the prompts in one pass and append them as rows; last-position logits."""
        job = self.start_prefill(prompts)
        logits = job.step(job.width)
        assert logits is not None
        self.merge(job)
        return logits

    def start_prefill(self, prompts: list[list[int]]) -> Prefill:
        """A prefill of ``prompts`` to run in chunks (``Prefill.step``), then ``merge``."""
        return Prefill(self, prompts)

    def merge(self, job: Prefill) -> None:
        """Copy a finished prefill's rows into the next free slots (prompt in columns 0..n-1)."""
        assert job.done == job.width
        g, first = len(job.lengths), self.n
        self._ensure(first + g, max(self.lengths + job.lengths) + 1)
        pairs = list(
            zip(self.cache.keys + self.cache.values, job.cache.keys + job.cache.values, strict=True)
        )
        for i, n in enumerate(job.lengths):
            for dst, src in pairs:
                dst[first + i, :, :n] = src[i, :, job.width - n :]
        self.lengths += job.lengths
        self.pos[first : first + g] = torch.tensor(job.lengths, device=self.device)
        self.n += g

    def decode(self, tokens: torch.Tensor | list[int]) -> torch.Tensor:
        """One step for every row: its last token at its next position; next-token logits."""
        n = self.n
        assert n > 0
        width = max(self.lengths) + 1
        self._ensure(n, width)
        ids = tokens if isinstance(tokens, torch.Tensor) else torch.tensor(tokens)
        ids = ids.to(self.device, non_blocking=True)
        pos = self.pos[:n].unsqueeze(1)
        mask = self._cols[:width].unsqueeze(0) <= pos  # [rows, width]
        self.cache.bind(slice(0, n), pos, width)
        logits = self.forward(ids.view(n, 1), pos, mask[:, None, None, :], self.cache)
        self.pos[:n] += 1
        self.lengths = [x + 1 for x in self.lengths]
        return logits

    def select(self, keep: list[int]) -> None:
        """Keep only these rows, in this order (row j becomes old row ``keep[j]``)."""
        if keep == list(range(self.n)):
            return
        if not keep:
            self.clear()
            return
        moves = [(s, d) for d, s in enumerate(keep) if s != d]
        if moves:
            width = max(self.lengths[s] for s in keep)
            src, dst = [s for s, _ in moves], [d for _, d in moves]
            self.cache.move_rows(src, dst, width)
            idx = torch.tensor(keep, device=self.device)
            self.pos[: len(keep)] = self.pos.index_select(0, idx)
        self.lengths = [self.lengths[s] for s in keep]
        self.n = len(keep)

    def _ensure(self, rows: int, columns: int) -> None:
        self.cache.ensure(rows, columns)
        slots, cols = self.cache.capacity
        if self.pos.shape[0] < slots:
            pos = torch.zeros(slots, dtype=torch.long, device=self.device)
            pos[: self.pos.shape[0]] = self.pos
            self.pos = pos
        if self._cols.shape[0] < cols:
            self._cols = torch.arange(cols, device=self.device)


def swap_remove_order(n: int, gone: set[int]) -> list[int]:
    """``select`` order that drops ``gone`` by moving rows from the end into the holes.

    Only as many rows move as leave (vs shifting every later row down one).
    """
    keep = [i for i in range(n) if i not in gone]
    tail = [i for i in keep if i >= len(keep)]
    order = list(range(len(keep)))
    holes = [i for i in range(len(keep)) if i in gone]
    for hole, src in zip(holes, tail, strict=True):
        order[hole] = src
    return order
