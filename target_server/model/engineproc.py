"""``--engine-process on`` (``--batching continuous``'s default): the decode loop in a process.

At the embedded model's size a forward is mostly Python-level work, and a decode
thread shares the server's GIL with the event loop: whatever the loop does per
token (wake the request's task, encode, send) is time a decode turn waits.  So,
as vLLM splits its engine core from the API server, the loop runs in a child
process (``multiprocessing`` *spawn*: safe beside uvicorn's threads, and what
CUDA needs):

- **the server process** keeps the tokenizer (chat template, prompt ids, usage,
  the per-request plan) and never loads the weights; it sends each request's
  plan and each cancellation to the child as one small message (a writer thread,
  so the event loop never blocks on the pipe), and one reader thread hands the
  child's messages to the requests' asyncio queues, one ``call_soon_threadsafe``
  per message;
- **the child** (``enginemain.child_main``) loads the model on its device, owns the slot KV
  cache and runs ``batched.DecodeLoop`` unchanged: the same admission, prefill
  chunks, fused sampling and per-request seeded streams, so a seeded request gives
  the same text in either mode.  A turn's pieces for all rows go to the server in
  **one** pipe message (two when a prefill finished in the turn: newcomers' first
  tokens go out before the decode step, as on a thread).  Its busy time, queue and
  batch size (and GPU memory on CUDA) are published in a small shared array the
  server's ``llmserve_engine_*`` gauges read.

Faults: a failing turn fails its rows with an error and the loop goes on (as on a
thread); a child that dies fails every running request with ``EngineFault``, new
ones are refused, ``/health`` answers ``failed`` with the reason (``fault``), and
``stop`` never waits on a dead child (join, then terminate, then kill).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import queue
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmload.target_server.busy import SharedMeter
from llmload.target_server.engine import EngineFault, PreparedRequest, TokenPiece
from llmload.target_server.model.base import (
    ContinuousEngine,
    Waiter,
    next_piece,
)
from llmload.target_server.model.embedded import embedded_model_dir
from llmload.target_server.model.enginemain import child_main
from llmload.target_server.model.enginewire import (
    ADD,
    BATCH,
    BUSY_SINCE,
    CANCEL,
    FAILED,
    GPU_ALLOC,
    GPU_RESERVED,
    PREFILLING,
    SHARED_SLOTS,
    STOP,
    TAKEN,
)

if TYPE_CHECKING:
    from llmload.target_server.model.loader import LoadedModel

log = logging.getLogger(__name__)

#: seconds ``stop`` waits for the child to finish before terminating it
STOP_WAIT_S = 10.0


class ProcessEngine(ContinuousEngine):
    """Continuous batching in a child process (see the module docstring)."""

    def __init__(self, settings: Any):
        super().__init__(settings)
        #: why the engine process is gone (None while it runs)
        self.fault: str | None = None
        self.pid: int | None = None
        self._proc: Any = None
        self._conn: Any = None
        self._shared: Any = None
        self._waiters: dict[int, Waiter] = {}
        self._next = 0
        self._outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self._budget = 0  # the child's prefill budget, from its ready message

    @property
    def prefill_budget(self) -> int:
        """Prompt tokens a decode step may prefill, as the child runs it (0 before start)."""
        return self._budget

    @prefill_budget.setter
    def prefill_budget(self, tokens: int) -> None:
        raise AttributeError("the engine process's prefill budget is --prefill-budget")

    # ------------------------------------------------------------ gauges

    def waiting(self) -> int:
        shared = self._shared
        if shared is None or self.fault:
            return 0
        return max(0, self._put - int(shared[TAKEN])) + int(shared[PREFILLING])

    def batch_size(self) -> int:
        return 0 if self._shared is None or self.fault else int(self._shared[BATCH])

    def extra_metrics(self) -> dict[str, float]:
        """Busy, queue and batch from the child's shared array; GPU memory as the child saw it."""
        out = {
            "engine_busy_ratio": self.busy.ratio(),
            "engine_queue_depth": float(self.waiting()),
            "engine_batch_size": float(self.batch_size()),
        }
        if self.prefill_budget:  # known once the child said it is ready
            out["engine_prefill_budget_tokens"] = float(self.prefill_budget)
        if self.lm is not None and self.lm.device.type == "cuda" and self._shared is not None:
            out["gpu_memory_allocated_bytes"] = float(self._shared[GPU_ALLOC])
            out["gpu_memory_reserved_bytes"] = float(self._shared[GPU_RESERVED])
        return out

    # ------------------------------------------------------------ lifecycle

    async def start(self, loaded: LoadedModel | None = None) -> None:
        if loaded is not None:
            raise ValueError("a loaded model runs in this process: use --engine-process off")
        await super().start()

    async def _load(self) -> LoadedModel:
        """Start the child (it loads the model) and load the tokenizer here meanwhile.

        The child starts before this process imports torch and transformers' tokenizer
        (``base`` imports neither), so the two processes import them side by side.
        """
        path = await asyncio.to_thread(_model_dir, self.settings)  # builds the embedded one once
        ctx = multiprocessing.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        self._shared = ctx.RawArray("d", SHARED_SLOTS)
        self.busy = SharedMeter(self._shared)
        self._proc = ctx.Process(
            target=child_main,
            args=(self.settings, child_conn, self._shared),
            name="llmload-engine",
            daemon=True,
        )
        self._proc.start()
        child_conn.close()
        self.pid = self._proc.pid
        tokenizer = await asyncio.to_thread(_tokenizer, path)
        info = await asyncio.to_thread(self._first_message)
        self._budget = int(info.pop("prefill_budget", 0))
        from llmload.target_server.model.loader import LoadedModel

        return LoadedModel(model=None, tokenizer=tokenizer, **info)

    def _first_message(self) -> dict[str, Any]:
        from llmload.target_server.model.loader import ModelLoadError

        try:
            kind, body = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(5)
            raise ModelLoadError(
                f"the engine process exited while loading (exit code {self._proc.exitcode})"
            ) from None
        if kind == FAILED:
            raise ModelLoadError(f"the engine process could not load the model: {body}")
        return dict(body)

    def _start_backend(self) -> None:
        log.info("decode loop in engine process %s (--engine-process on)", self.pid)
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._read, name="engine-reader", daemon=True),
            threading.Thread(target=self._write, name="engine-writer", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _stop_backend(self) -> None:
        """Ask the child to stop; never wait on it for long (terminate, then kill)."""
        self._stopping = True
        self._outbox.put((STOP,))
        self._outbox.put(None)
        proc = self._proc
        if proc is not None:
            proc.join(STOP_WAIT_S)
            if proc.is_alive():
                log.warning("engine process %s did not stop; terminating it", proc.pid)
                proc.terminate()
                proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        for thread in self._threads:
            thread.join(5)
        self._threads = []
        if self._conn is not None:
            self._conn.close()
        self._fail_all("the engine stopped")

    # ------------------------------------------------------------ requests

    async def generate(self, prepared: PreparedRequest) -> AsyncIterator[TokenPiece]:
        """Send the request to the child and relay its pieces; cancel it there when closed early."""
        if self.fault or self._proc is None or not self._threads:
            raise EngineFault(self.fault or "the engine process is not running")
        loop = asyncio.get_running_loop()
        key = self._next
        self._next += 1
        waiter = Waiter(loop)
        self._waiters[key] = waiter
        if self.fault:  # died between the check and the registration: nobody will answer
            self._waiters.pop(key, None)
            raise EngineFault(self.fault)
        self._active += 1
        self._put += 1
        self._outbox.put((ADD, key, prepared.payload))
        ended = False
        try:
            while True:
                piece = await next_piece(waiter.out)
                yield piece
                if piece.finish_reason is not None:
                    ended = True
                    break
        except EngineFault:
            ended = True
            raise
        finally:
            if not ended and not waiter.done.done():
                self._outbox.put((CANCEL, key))
            try:
                await asyncio.wait({waiter.done}, timeout=30)
            except asyncio.CancelledError:  # cancelled again while waiting: count it out later
                waiter.done.add_done_callback(self._left)
                raise
            self._waiters.pop(key, None)  # the reader drops it when the child is done with it
            self._left()

    # ------------------------------------------------------------ the two threads

    def _write(self) -> None:
        """Requests and cancellations to the child, off the event loop."""
        while True:
            msg = self._outbox.get()
            if msg is None:
                return
            try:
                self._conn.send(msg)
            except (OSError, ValueError):  # the child is gone: the reader says so
                return

    def _read(self) -> None:
        """Each turn message -> the requests' queues (one ``call_soon_threadsafe`` per loop)."""
        conn = self._conn
        while True:
            try:
                pieces, errors, done = conn.recv()
            except (EOFError, OSError, ValueError):
                break
            waiters = self._waiters
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Waiter, Any]]] = {}
            for key, text, reason in pieces:
                w = waiters.get(key)
                if w is not None:
                    by_loop.setdefault(w.loop, []).append((w, TokenPiece(text, reason)))
            for key, message in errors:
                w = waiters.get(key)
                if w is not None:
                    by_loop.setdefault(w.loop, []).append((w, RuntimeError(message)))
            for key in done:
                w = waiters.pop(key, None)
                if w is not None:
                    by_loop.setdefault(w.loop, []).append((w, None))
            for loop, group in by_loop.items():
                with contextlib.suppress(RuntimeError):  # that loop has closed
                    loop.call_soon_threadsafe(_dispatch, group)
        if not self._stopping:
            proc = self._proc
            proc.join(1)
            code = proc.exitcode
            self.fault = f"the engine process {proc.pid} exited (exit code {code})"
            self._shared[BUSY_SINCE] = 0.0  # a turn it died in is not work going on
            log.error("%s: failing the %d running requests", self.fault, len(self._waiters))
            self._ready = False
        self._fail_all(self.fault or "the engine stopped")

    def _fail_all(self, reason: str) -> None:
        """Every request still waiting on the child ends with ``reason``."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Waiter, Any]]] = {}
        waiters, self._waiters = self._waiters, {}
        for w in waiters.values():
            by_loop.setdefault(w.loop, []).extend([(w, RuntimeError(reason)), (w, None)])
        for loop, group in by_loop.items():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_dispatch, group)


def _dispatch(group: list[tuple[Waiter, Any]]) -> None:
    """On the event loop: a piece or an error to its queue; ``None``: the child is done with it."""
    for w, item in group:
        if item is None:
            if not w.done.done():
                w.done.set_result(None)
        elif not w.done.done():
            w.out.put_nowait(item)


def _model_dir(settings: Any) -> Path:
    return embedded_model_dir() if not settings.model else Path(settings.model).expanduser()


def _tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)
