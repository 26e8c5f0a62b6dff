"""The engine process's side of ``--engine-process on`` (see ``engineproc``).

``serve`` (called by ``enginemain.child_main``) loads the model, tells the server
what it loaded (or why it could not), then runs ``batched.DecodeLoop`` with
requests read from the pipe and each flush's pieces, errors and finished rows
written back as one message.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import torch

from llmload.target_server.busy import PublishedMeter
from llmload.target_server.model.base import DEFAULT_MAX_BATCH
from llmload.target_server.model.batched import DecodeLoop, Row
from llmload.target_server.model.enginewire import (
    ADD,
    BATCH,
    CANCEL,
    FAILED,
    GPU_ALLOC,
    GPU_RESERVED,
    PREFILLING,
    READY,
    STOP,
    TAKEN,
)
from llmload.target_server.model.kvbatch import check_full_attention
from llmload.target_server.model.loader import LoadedModel, load

log = logging.getLogger(__name__)


class PipeLoop(DecodeLoop):
    """The decode loop of the engine process: requests from the pipe, one message per flush."""

    def __init__(
        self, lm: LoadedModel, max_batch: int, conn: Any, shared: Any, prefill_budget: int = 0
    ):
        super().__init__(lm, max_batch, PublishedMeter(shared), prefill_budget)
        self.conn, self.shared = conn, shared
        self.cuda = lm.device.type == "cuda"
        self.queued: deque[Row] = deque()
        self.by_key: dict[int, Row] = {}
        self.taken = 0
        self.pieces: list[tuple[int, str, str | None]] = []
        self.errors: list[tuple[int, str]] = []
        self.done: list[int] = []

    def _read(self, timeout: float) -> None:
        try:
            ready = self.conn.poll(timeout)
            while ready:
                msg = self.conn.recv()
                if msg[0] == ADD:
                    row = Row(msg[2], msg[1])
                    self.by_key[msg[1]] = row
                    self.queued.append(row)
                elif msg[0] == CANCEL:
                    gone = self.by_key.get(msg[1])
                    if gone is not None:
                        gone.cancelled = True
                elif msg[0] == STOP:
                    self.stopping = True
                ready = self.conn.poll(0)
        except (EOFError, OSError):  # the server process is gone
            self.stopping = True

    def take(self, free: int, block: bool) -> list[Row]:
        self._read(0.1 if block else 0.0)
        rows: list[Row] = []
        while self.queued and len(rows) < free:
            rows.append(self.queued.popleft())
        self.taken += len(rows)
        self.shared[TAKEN] = self.taken
        return rows

    def send(self, items: list[tuple[Row, Any]]) -> None:
        for row, item in items:
            if isinstance(item, BaseException):
                self.errors.append((row.key, f"{type(item).__name__}: {item}"))
            else:
                self.pieces.append((row.key, item.text, item.finish_reason))

    def finish(self, row: Row) -> None:
        self.done.append(row.key)
        self.by_key.pop(row.key, None)

    def flush(self) -> None:
        shared = self.shared
        shared[PREFILLING] = self.prefilling()
        shared[BATCH] = len(self.rows)
        if self.cuda:
            shared[GPU_ALLOC] = torch.cuda.memory_allocated(self.lm.device)
            shared[GPU_RESERVED] = torch.cuda.memory_reserved(self.lm.device)
        if self.pieces or self.errors or self.done:
            msg = (self.pieces, self.errors, self.done)
            self.pieces, self.errors, self.done = [], [], []
            try:
                self.conn.send(msg)
            except (OSError, ValueError):
                self.stopping = True


def serve(settings: Any, conn: Any, shared: Any) -> None:
    """Load the model, say ready (or why not), run the loop until stopped."""
    try:
        lm = load(settings)
        check_full_attention(lm.model.config)
    except Exception as exc:
        log.debug("engine process: load failed", exc_info=True)
        conn.send((FAILED, f"{type(exc).__name__}: {exc}"))
        return
    info = {
        "name": lm.name,
        "source": lm.source,
        "embedded": lm.embedded,
        "device": lm.device,
        "dtype": lm.dtype,
        "quantization": lm.quantization,
        "params": lm.params,
        "max_context": lm.max_context,
        "eos_ids": lm.eos_ids,
        "load_s": lm.load_s,
        "cache_kwarg": lm.cache_kwarg,
        "threads": lm.threads,
        "generation_config": lm.generation_config,
    }
    batch = settings.max_concurrency or DEFAULT_MAX_BATCH
    loop = PipeLoop(lm, batch, conn, shared, settings.prefill_budget)
    # the budget the loop runs with (0 asked: the device's default), for the parent's gauge
    conn.send((READY, {**info, "prefill_budget": loop.prefill_budget}))
    loop.run()
