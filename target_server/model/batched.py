"""``--batching continuous``: one decode loop that adds and drops requests at every step.

One thread owns the model and runs ``DecodeLoop``.  Each turn it (1) drops
cancelled requests, (2) spends a budget of prompt tokens on prefilling newcomers
(shortest first, in chunks, with their own KV cache), and a newcomer whose prefill
completes gets its first token at once and joins the running batch (``kvbatch``),
(3) runs one decode step for every running request, (4) drops the finished ones.
Where that thread lives is the subclass's business: ``BatchedEngine`` runs it on a
thread of the server process and hands pieces to the event loop with one
``call_soon_threadsafe`` per batch of pieces (``--engine-process off``);
``engineproc.ProcessEngine`` runs it in a child process and sends each turn's
pieces in one pipe message (``--engine-process on``, the default).  The cache is ``kvbatch``'s
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

import abc
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

from llmload.target_server.busy import BusyMeter
from llmload.target_server.engine import EngineFault, PreparedRequest, TokenPiece
from llmload.target_server.model.base import (
    ContinuousEngine,
    PieceMaker,
    Plan,
    Waiter,
    next_piece,
)
from llmload.target_server.model.kvbatch import Prefill, SlotBatch, swap_remove_order
from llmload.target_server.model.loader import LoadedModel
from llmload.target_server.model.sampling import Sampler, choose_rows, penalty_processors

log = logging.getLogger(__name__)

#: prompt tokens prefilled per turn: a long prompt is spread over several decode
#: steps instead of stalling every running stream for its whole prefill
PREFILL_BUDGET_CPU = 512
PREFILL_BUDGET_CUDA = 4096


@dataclass(eq=False)
class Row:
    """One request inside the decode loop."""

    plan: Plan
    #: the engine's handle for the request (``Waiter`` on a thread, a number in a child)
    key: Any
    cancelled: bool = False
    # loop-side state
    tokens: list[int] = field(default_factory=list)
    maker: PieceMaker | None = None
    sampler: Sampler | None = None
    procs: LogitsProcessorList | None = None


class DecodeLoop(abc.ABC):
    """The model side of continuous batching: ``run`` it on the one thread that owns the model.

    Subclasses say where requests come from and where pieces go: ``take`` (new
    rows, at most ``free``), ``send`` (pieces, or an exception for a failed row),
    ``finish`` (the loop is done with a row) and ``flush`` (a point where what was
    sent should go out: after a prefill's first tokens and at the end of each turn).
    """

    def __init__(self, lm: LoadedModel, max_batch: int, busy: BusyMeter, prefill_budget: int = 0):
        self.lm, self.max_batch, self.busy = lm, max_batch, busy
        cuda = lm.device.type == "cuda"
        #: ``--prefill-budget`` (0: the device's default)
        self.prefill_budget = prefill_budget or (
            PREFILL_BUDGET_CUDA if cuda else PREFILL_BUDGET_CPU
        )
        self.rows: list[Row] = []
        #: prompts being prefilled in chunks, with the rows they belong to
        self.prefills: list[tuple[list[Row], Prefill]] = []
        self.stopping = False

    # ------------------------------------------------------------ hooks

    @abc.abstractmethod
    def take(self, free: int, block: bool) -> list[Row]:
        """Up to ``free`` new rows (``block``: the loop is idle, wait ~0.1 s for one)."""

    @abc.abstractmethod
    def send(self, items: list[tuple[Row, Any]]) -> None:
        """Hand over each row's ``TokenPiece`` (or the exception that failed it)."""

    @abc.abstractmethod
    def finish(self, row: Row) -> None:
        """The loop holds nothing of ``row`` any more."""

    def flush(self) -> None:
        """What ``send`` and ``finish`` collected goes out now (default: nothing held)."""
        return None

    # ------------------------------------------------------------ the loop

    def prefilling(self) -> int:
        return sum(len(g) for g, _ in self.prefills)

    def run(self) -> None:
        """Turns until ``stopping``; a failing turn fails its rows, not the loop."""
        lm = self.lm
        batch = SlotBatch(lm.model, lm.cache_kwarg, lm.device, rows=min(self.max_batch, 8))
        with torch.inference_mode():
            while not self.stopping:
                try:
                    self.turn(batch)
                except Exception as exc:
                    log.exception(
                        "decode step failed; failing the %d running requests", len(self.rows)
                    )
                    self._fail(self.rows + [r for g, _ in self.prefills for r in g], exc)
                    batch.clear()
                self.flush()
        left = self.rows + [r for g, _ in self.prefills for r in g] + self.take(1 << 30, False)
        self._fail(left, RuntimeError("the engine stopped"))
        self.flush()

    def _fail(self, rows: list[Row], exc: BaseException) -> None:
        for row in rows:
            self.send([(row, exc)])
            self.finish(row)
        self.rows, self.prefills = [], []

    def turn(self, batch: SlotBatch) -> None:
        free = self.max_batch - len(self.rows) - self.prefilling()
        new = self.take(free, block=not self.rows and not self.prefills)
        if not (new or self.rows or self.prefills):
            return
        self.busy.begin()
        try:
            self._work(batch, new)
        finally:
            self.busy.end()

    def _work(self, batch: SlotBatch, new: list[Row]) -> None:
        for row in new:
            if row.cancelled:
                self.finish(row)
        new = [r for r in new if not r.cancelled]
        self._retire(batch, lambda r: r.cancelled)
        if new:
            self._admit(new)
            for group in prefill_groups(new):
                self.prefills.append((group, batch.start_prefill([r.plan.ids for r in group])))
        if self.prefills:  # newcomers first: their first token goes out before the next step
            self._prefill(batch)
            self.flush()
        if self.rows:  # then one decode step for every running request
            logits = batch.decode([r.tokens[-1] for r in self.rows])
            self.send(self._step(self.rows, logits))
            self._retire(batch, _finished)

    def _prefill(self, batch: SlotBatch) -> None:
        """Spend this turn's prefill budget, shortest job first; finished jobs join the batch."""
        budget = self.prefill_budget
        self.prefills.sort(key=lambda job: job[1].remaining)
        while self.prefills and budget > 0:
            group, job = self.prefills[0]
            if all(r.cancelled for r in group):
                for row in group:
                    self.finish(row)
                self.prefills.pop(0)
                continue
            columns = max(1, budget // len(group))
            budget -= columns * len(group)
            logits = job.step(columns)
            if logits is None:
                break
            self.prefills.pop(0)
            batch.merge(job)
            self.rows += group
            self.send(self._step(group, logits))
        self._retire(batch, lambda r: _finished(r) or r.cancelled)

    def _retire(self, batch: SlotBatch, gone: Callable[[Row], bool]) -> None:
        """Drop the rows for which ``gone`` holds from the list and the cache."""
        leaving = {i for i, r in enumerate(self.rows) if gone(r)}
        if not leaving:
            return
        for i in leaving:
            self.finish(self.rows[i])
        order = swap_remove_order(len(self.rows), leaving)
        self.rows = [self.rows[i] for i in order]
        batch.select(order)

    def _admit(self, rows: list[Row]) -> None:
        tok = self.lm.tokenizer
        for row in rows:
            plan = row.plan
            row.tokens = list(plan.ids)
            row.maker = PieceMaker(plan, tok)
            row.sampler = Sampler(plan.gc, plan.seed)
            row.procs = penalty_processors(
                plan.gc, plan.penalties, len(plan.ids), sorted(plan.eos_ids), min_tokens=False
            )

    def _step(self, rows: list[Row], logits: torch.Tensor) -> list[tuple[Row, TokenPiece]]:
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


class _ThreadLoop(DecodeLoop):
    """The loop on a thread of the server process: pieces go straight to the event loop."""

    def __init__(self, lm: LoadedModel, max_batch: int, busy: BusyMeter, prefill_budget: int):
        super().__init__(lm, max_batch, busy, prefill_budget)
        self.inbox: queue.SimpleQueue[Row | None] = queue.SimpleQueue()
        self.taken = 0  # written by the loop thread only

    def take(self, free: int, block: bool) -> list[Row]:
        rows: list[Row] = []
        with contextlib.suppress(queue.Empty):
            if block:
                item = self.inbox.get(timeout=0.1)
                if item is not None:
                    rows.append(item)
            while len(rows) < free:
                item = self.inbox.get_nowait()
                if item is not None:
                    rows.append(item)
        self.taken += len(rows)
        return rows

    def send(self, items: list[tuple[Row, Any]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Row, Any]]] = {}
        for row, item in items:
            by_loop.setdefault(row.key.loop, []).append((row, item))
        for loop, group in by_loop.items():
            loop.call_soon_threadsafe(_deliver, group)

    def finish(self, row: Row) -> None:
        row.key.loop.call_soon_threadsafe(_resolve, row.key.done)


class BatchedEngine(ContinuousEngine):
    """Continuous batching on one decode thread of this process (``--engine-process off``)."""

    def __init__(self, settings: Any):
        super().__init__(settings)
        self._core: _ThreadLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def prefill_budget(self) -> int:
        return self._core.prefill_budget if self._core else PREFILL_BUDGET_CPU

    @prefill_budget.setter
    def prefill_budget(self, tokens: int) -> None:
        assert self._core is not None
        self._core.prefill_budget = tokens

    def waiting(self) -> int:
        """Requests queued for the batch or still prefilling."""
        core = self._core
        return 0 if core is None else max(0, self._put - core.taken) + core.prefilling()

    def batch_size(self) -> int:
        return 0 if self._core is None else len(self._core.rows)

    def _start_backend(self) -> None:
        budget = self.settings.prefill_budget
        self._core = _ThreadLoop(self._loaded(), self.max_batch, self.busy, budget)
        self._thread = threading.Thread(target=self._core.run, name="decode-loop", daemon=True)
        self._thread.start()

    def _stop_backend(self) -> None:
        if self._core is not None:
            self._core.stopping = True
            self._core.inbox.put(None)
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    async def generate(self, prepared: PreparedRequest) -> AsyncIterator[TokenPiece]:
        """Queue the request for the loop and relay its pieces; drop it when closed early."""
        core = self._core
        if core is None or self._thread is None or not self._thread.is_alive():
            raise EngineFault("the decode loop is not running")
        loop = asyncio.get_running_loop()
        waiter = Waiter(loop)
        row = Row(prepared.payload, waiter)
        self._active += 1
        self._put += 1
        core.inbox.put(row)
        try:
            while True:
                piece = await next_piece(waiter.out)
                yield piece
                if piece.finish_reason is not None:
                    break
        finally:
            row.cancelled = True
            core.inbox.put(None)  # wake an idle loop so it notices
            try:
                await asyncio.wait({waiter.done}, timeout=30)
            except asyncio.CancelledError:  # cancelled again while waiting: count it out later
                waiter.done.add_done_callback(self._left)
                raise
            self._left()


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


def _min_new(row: Row) -> int:
    return int(row.plan.gc.min_new_tokens or 0)


def _finished(row: Row) -> bool:
    return row.maker is not None and row.maker.finished


def _deliver(group: list[tuple[Row, Any]]) -> None:
    for row, item in group:
        row.key.out.put_nowait(item)


def _resolve(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
