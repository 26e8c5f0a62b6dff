"""``--batching none``: the seeds' approach, one ``model.generate`` thread per request.

Each request gets its own thread running ``model.generate`` with a streamer that
turns token ids into ``TokenPiece``s (off the event loop) and hands them over with
``loop.call_soon_threadsafe``.  Requests do not share forward passes: under load
the threads take turns on the CPU/GPU.  A ``StoppingCriteria`` reads the
request's cancel flag, so a disconnect stops generation within one decode step;
``generate`` (the async side) waits for its thread before it returns.

Beam search (``num_beams > 1`` in ``--generation-config``) cannot stream in
transformers: its tokens arrive all together when the search ends.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import torch
from transformers.generation.logits_process import LogitsProcessorList
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from llmload.target_server.engine import PreparedRequest, TokenPiece
from llmload.target_server.model.base import ModelEngine, PieceMaker, Plan, next_piece
from llmload.target_server.model.sampling import OpenAIPenalties, Sampler, SamplingProcessor


class _Cancelled(StoppingCriteria):
    def __init__(self, flag: threading.Event):
        self.flag = flag

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kw: Any) -> Any:
        flag = self.flag.is_set()
        return torch.full((input_ids.shape[0],), flag, dtype=torch.bool, device=input_ids.device)


class _Pieces(BaseStreamer):
    """Streamer: token ids -> ``TokenPiece``s handed to ``emit`` (on the generate thread)."""

    def __init__(
        self, plan: Plan, tokenizer: Any, emit: Callable[[Any], None], cancel: threading.Event
    ):
        self.maker = PieceMaker(plan, tokenizer)
        self.emit, self.cancel = emit, cancel
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate first hands over the prompt
            self._prompt_seen = True
            return
        for token in value.reshape(-1).tolist():
            self.token(int(token))

    def token(self, token: int) -> None:
        if self.maker.finished:
            return
        piece = self.maker.token(token)
        if self.maker.finished:
            self.cancel.set()  # a stop string ends generate early too
        self.emit(piece)

    def end(self) -> None:
        if not self.maker.finished and not self.cancel.is_set():
            self.maker.finished = True
            self.emit(TokenPiece(self.maker.text.flush(), finish_reason="stop"))


class ThreadedEngine(ModelEngine):
    """One generate thread per request (see the module docstring)."""

    batching = "none"

    def __init__(self, settings: Any):
        super().__init__(settings)
        self._running = 0
        self._threads: dict[threading.Thread, threading.Event] = {}

    def running(self) -> int:
        """Requests whose generate thread is alive."""
        return self._running

    def _stop_backend(self) -> None:
        for thread, cancel in list(self._threads.items()):
            cancel.set()
            thread.join(timeout=30)

    async def generate(self, prepared: PreparedRequest) -> AsyncIterator[TokenPiece]:
        """Start the request's thread and relay its pieces; stop it when closed early."""
        plan: Plan = prepared.payload
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        done = loop.create_future()
        cancel = threading.Event()

        def emit(item: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def finished() -> None:
            if not done.done():
                done.set_result(None)

        thread = threading.Thread(
            target=self._run,
            args=(plan, emit, cancel, lambda: loop.call_soon_threadsafe(finished)),
            name=f"generate-{prepared.request.request_id}",
            daemon=True,
        )
        if self._running == 0:
            self.busy.begin()
        self._running += 1
        self._threads[thread] = cancel
        thread.start()
        try:
            while True:
                piece = await next_piece(queue)
                yield piece
                if piece.finish_reason is not None:
                    break
        finally:
            cancel.set()

            def reap(_done: object = None) -> None:
                thread.join()  # it has returned from its work; this only reaps it
                self._threads.pop(thread, None)
                self._running -= 1
                if self._running == 0:
                    self.busy.end()

            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:  # cancelled again while waiting: reap it later
                done.add_done_callback(reap)
                raise
            reap()

    def _run(
        self,
        plan: Plan,
        emit: Callable[[Any], None],
        cancel: threading.Event,
        finished: Callable[[], None],
    ) -> None:
        lm = self._loaded()
        streamer = _Pieces(plan, lm.tokenizer, emit, cancel)
        try:
            gc = copy.deepcopy(plan.gc)
            gc.stop_strings = None
            procs = LogitsProcessorList()
            if plan.penalties:
                procs.append(
                    OpenAIPenalties(
                        len(plan.ids), **{k.split("_")[0]: v for k, v in plan.penalties.items()}
                    )
                )
            beams = (gc.num_beams or 1) > 1
            if gc.do_sample and not beams:
                # sample with the request's own generator: generate's RNG is shared by all threads
                procs.append(SamplingProcessor(Sampler(gc, plan.seed)))
                gc.do_sample = False
                gc.temperature = gc.top_p = gc.top_k = gc.min_p = gc.typical_p = None
            elif beams and gc.do_sample:
                torch.manual_seed(plan.seed)
            ids = torch.tensor([plan.ids], device=lm.device)
            with torch.inference_mode():
                out = lm.model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    generation_config=gc,
                    logits_processor=procs,
                    stopping_criteria=StoppingCriteriaList([_Cancelled(cancel)]),
                    streamer=None if beams else streamer,
                )
            if beams:  # beam search cannot stream: hand over all tokens now
                streamer.put(ids)
                for token in out[0, len(plan.ids) :].tolist():
                    streamer.token(int(token))
                streamer.end()
        except Exception as exc:  # surfaced to the request as an EngineFault
            emit(exc)
        finally:
            finished()
