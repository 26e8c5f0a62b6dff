"""``--batching continuous``: one decode loop that adds and drops requests at every step.

One thread owns the model.  Each turn it (1) drops cancelled requests, (2) spends
a budget of prompt tokens on prefilling newcomers (shortest first, in chunks, with
their own KV cache), and a newcomer whose prefill completes gets its first token
at once and joins the running batch (``kvbatch``), (3) runs one decode step for
every running request, (4) drops the finished ones.  Pieces go to the event loop
with one ``call_soon_threadsafe`` per batch of pieces.  The cache is ``kvbatch``'s
pre-allocated slot cache (a step writes one column per row; nothing is
concatenated or re-allocated per token) and a batch samples in one fused
softmax/cumsum/searchsorted (``sampling.choose_rows``).  A short request never
waits for a long one to finish, and a long prompt never stalls the others for its
whole prefill.

Why not transformers' own ``init_continuous_batching``: on the same workload on
this CPU it ran at about two thirds of this loop's rate, and it samples from one
shared RNG with batch-wide settings, so per-request ``seed``, ``min_tokens`` and
penalties could not be honoured.  Here every row has its own ``Sampler`` and
processors (``sampling``); beam search still needs ``--batching none``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from transformers.generation.logits_process import LogitsProcessorList

from target_server.engine import EngineFault, EngineInputError, PreparedRequest, TokenPiece
from target_server.model import genconfig
from target_server.model.base import ModelEngine, PieceMaker, Plan, next_piece
from target_server.model.kvbatch import Prefill, SlotBatch, swap_remove_order
from target_server.model.sampling import Sampler, choose_rows, penalty_processors

log = logging.getLogger(__name__)

#: batch size when --max-concurrency is 0 (unlimited at the server)
DEFAULT_MAX_BATCH = 64
#: prompt tokens prefilled per turn: a long prompt is spread over several decode
#: steps instead of stalling every running stream for its whole prefill
PREFILL_BUDGET_CPU = 512
PREFILL_BUDGET_CUDA = 4096


@dataclass(eq=False)
class _Row:
    """One request inside the loop."""

    plan: Plan
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue[Any]
    done: asyncio.Future[None]
    cancelled: bool = False
    # loop-thread state
    tokens: list[int] = field(default_factory=list)
    maker: PieceMaker | None = None
    sampler: Sampler | None = None
    procs: LogitsProcessorList | None = None


class BatchedEngine(ModelEngine):
    """Continuous batching on one decode thread (see the module docstring)."""

    batching = "continuous"

    def __init__(self, settings: Any):
        super().__init__(settings)
        genconfig.check_continuous(self.server_fields)
        self.max_batch = settings.max_concurrency or DEFAULT_MAX_BATCH
        self._inbox: queue.SimpleQueue[_Row | None] = queue.SimpleQueue()
        self._rows: list[_Row] = []
        #: prompts being prefilled in chunks, with the rows they belong to
        self._prefills: list[tuple[list[_Row], Prefill]] = []
        self.prefill_budget = PREFILL_BUDGET_CPU
        self._active = 0
        # queue depth = put - taken; each counter is written by one thread only
        self._put = 0
        self._taken = 0
        self._thread: threading.Thread | None = None
        self._stopping = False

    def running(self) -> int:
        """Requests inside the engine (in the batch or about to join it)."""
        return self._active

    def waiting(self) -> int:
        """Requests queued for the batch or still prefilling."""
        return max(0, self._put - self._taken) + sum(len(g) for g, _ in self._prefills)

    def batch_size(self) -> int:
        return len(self._rows)

    def _check(self, gc: Any) -> None:
        if (gc.num_beams or 1) > 1:
            raise EngineInputError("beam search needs --batching none", param="num_beams")

    def _warmup_requests(self) -> int:
        return 4

    def _start_backend(self) -> None:
        self._stopping = False
        cuda = self._loaded().device.type == "cuda"
        self.prefill_budget = PREFILL_BUDGET_CUDA if cuda else PREFILL_BUDGET_CPU
        self._thread = threading.Thread(target=self._loop, name="decode-loop", daemon=True)
        self._thread.start()

    def _stop_backend(self) -> None:
        self._stopping = True
        self._inbox.put(None)
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    async def generate(self, prepared: PreparedRequest) -> AsyncIterator[TokenPiece]:
        """Queue the request for the loop and relay its pieces; drop it when closed early."""
        if self._thread is None or not self._thread.is_alive():
            raise EngineFault("the decode loop is not running")
        loop = asyncio.get_running_loop()
        row = _Row(prepared.payload, loop, asyncio.Queue(), loop.create_future())
        self._active += 1
        self._put += 1
        self._inbox.put(row)
        try:
            while True:
                piece = await next_piece(row.out)
                yield piece
                if piece.finish_reason is not None:
                    break
        finally:
            row.cancelled = True
            self._inbox.put(None)  # wake an idle loop so it notices
            try:
                await asyncio.wait({row.done}, timeout=30)
            except asyncio.CancelledError:  # cancelled again while waiting: count it out later
                row.done.add_done_callback(self._left)
                raise
            self._left()

    def _left(self, _done: object = None) -> None:
        self._active -= 1

    # ------------------------------------------------------------ loop thread

    def _loop(self) -> None:
        lm = self._loaded()
        batch = SlotBatch(lm.model, lm.cache_kwarg, lm.device, rows=min(self.max_batch, 8))
        with torch.inference_mode():
            while not self._stopping:
                try:
                    self._turn(batch)
                except Exception as exc:
                    log.exception(
                        "decode step failed; failing the %d running requests", len(self._rows)
                    )
                    for row in self._rows + [r for g, _ in self._prefills for r in g]:
                        self._send([(row, exc)])
                        self._finish(row)
                    self._rows, self._prefills = [], []
                    batch.clear()
        for row in self._rows + [r for g, _ in self._prefills for r in g] + self._drain():
            self._send([(row, RuntimeError("the engine stopped"))])
            self._finish(row)
        self._rows, self._prefills = [], []

    def _drain(self, block: bool = False) -> list[_Row]:
        """New requests from the inbox, as many as the batch has room for (``block``: wait 0.1s)."""
        rows: list[_Row] = []
        free = self.max_batch - len(self._rows) - sum(len(g) for g, _ in self._prefills)
        with contextlib.suppress(queue.Empty):
            if block:
                item = self._inbox.get(timeout=0.1)
                if item is not None:
                    rows.append(item)
            while len(rows) < free:
                item = self._inbox.get_nowait()
                if item is not None:
                    rows.append(item)
        self._taken += len(rows)
        return rows

    def _turn(self, batch: SlotBatch) -> None:
        new = self._drain(block=not self._rows and not self._prefills)
        if not (new or self._rows or self._prefills):
            return
        self.busy.begin()
        try:
            self._work(batch, new)
        finally:
            self.busy.end()

    def _work(self, batch: SlotBatch, new: list[_Row]) -> None:
        for row in new:
            if row.cancelled:
                self._finish(row)
        new = [r for r in new if not r.cancelled]
        self._retire(batch, lambda r: r.cancelled)
        if new:
            self._admit(new)
            for group in prefill_groups(new):
                self._prefills.append((group, batch.start_prefill([r.plan.ids for r in group])))
        if self._prefills:  # newcomers first: their first token goes out before the next step
            self._prefill(batch)
        if self._rows:  # then one decode step for every running request
            logits = batch.decode([r.tokens[-1] for r in self._rows])
            self._send(self._step(self._rows, logits))
            self._retire(batch, _finished)

    def _prefill(self, batch: SlotBatch) -> None:
        """Spend this turn's prefill budget, shortest job first; finished jobs join the batch."""
        budget = self.prefill_budget
        self._prefills.sort(key=lambda job: job[1].remaining)
        while self._prefills and budget > 0:
            group, job = self._prefills[0]
            if all(r.cancelled for r in group):
                for row in group:
                    self._finish(row)
                self._prefills.pop(0)
                continue
            columns = max(1, budget // len(group))
            budget -= columns * len(group)
            logits = job.step(columns)
            if logits is None:
                break
            self._prefills.pop(0)
            batch.merge(job)
            self._rows += group
            self._send(self._step(group, logits))
        self._retire(batch, lambda r: _finished(r) or r.cancelled)

    def _retire(self, batch: SlotBatch, gone: Callable[[_Row], bool]) -> None:
        """Drop the rows for which ``gone`` holds from the list and the cache."""
        leaving = {i for i, r in enumerate(self._rows) if gone(r)}
        if not leaving:
            return
        for i in leaving:
            self._finish(self._rows[i])
        order = swap_remove_order(len(self._rows), leaving)
        self._rows = [self._rows[i] for i in order]
        batch.select(order)

    def _admit(self, rows: list[_Row]) -> None:
        tok = self._loaded().tokenizer
        for row in rows:
            plan = row.plan
            row.tokens = list(plan.ids)
            row.maker = PieceMaker(plan, tok)
            row.sampler = Sampler(plan.gc, plan.seed)
            row.procs = penalty_processors(
                plan.gc, plan.penalties, len(plan.ids), sorted(plan.eos_ids), min_tokens=False
            )

    def _step(self, rows: list[_Row], logits: torch.Tensor) -> list[tuple[_Row, TokenPiece]]:
        """Choose each row's next token from its logits row; return the pieces to send."""
        scores = logits.float()
        eos = sorted({t for r in rows for t in r.plan.eos_ids if t < scores.shape[-1]})
        early = [i for i, r in enumerate(rows) if len(r.tokens) - len(r.plan.ids) < _min_new(r)]
        if early and eos:  # min_tokens / ignore_eos: no EOS yet, all such rows at once
            dev = scores.device
            rows_idx = torch.tensor(early, device=dev).unsqueeze(1)
            scores[rows_idx, torch.tensor(eos, device=dev).unsqueeze(0)] = float("-inf")
        histories: list[torch.Tensor | None] = []
        for i, row in enumerate(rows):
            needs = bool(row.procs) or (row.sampler is not None and bool(row.sampler.warpers))
            history = torch.tensor([row.tokens], device=scores.device) if needs else None
            if row.procs:
                scores[i : i + 1] = row.procs(cast(torch.LongTensor, history), scores[i : i + 1])
            histories.append(history)
        tokens = choose_rows([cast(Sampler, r.sampler) for r in rows], histories, scores)
        out = []
        for row, token in zip(rows, tokens, strict=True):
            assert row.maker is not None
            row.tokens.append(token)
            out.append((row, row.maker.token(token)))
        return out

    def _send(self, items: list[tuple[_Row, Any]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Row, Any]]] = {}
        for row, item in items:
            by_loop.setdefault(row.loop, []).append((row, item))
        for loop, group in by_loop.items():
            loop.call_soon_threadsafe(_deliver, group)

    def _finish(self, row: _Row) -> None:
        row.loop.call_soon_threadsafe(_resolve, row.done)


def prefill_groups(rows: list[Any], waste: float = 1.25) -> list[list[Any]]:
    """Split newcomers (shortest first) so no group pads to more than ``waste`` x its tokens.

    A 3,000-token prompt prefilled together with short ones would pad every one of
    them to 3,000 tokens; grouping keeps the padded work near the real work.
    """
    ordered = sorted(rows, key=lambda r: len(r.plan.ids))
    groups: list[list[Any]] = []
    real = 0
    for row in ordered:
        n = len(row.plan.ids)
        if groups and n * (len(groups[-1]) + 1) <= waste * (real + n):
            groups[-1].append(row)
            real += n
        else:
            groups.append([row])
            real = n
    return groups


def _min_new(row: _Row) -> int:
    return int(row.plan.gc.min_new_tokens or 0)


def _finished(row: _Row) -> bool:
    return row.maker is not None and row.maker.finished


def _deliver(group: list[tuple[_Row, Any]]) -> None:
    for row, item in group:
        row.out.put_nowait(item)


def _resolve(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
