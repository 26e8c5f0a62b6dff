"""The locust user: one simulated chat client sending prompts through a protocol adapter.

Each request is timed by the SSE timing core from ``t0`` (the moment the call
is handed to the HTTP client) and becomes exactly one ``RequestRecord`` —
whatever happened, including a cancellation when the run stops it mid-flight
(``disconnect``, error ``cancelled by the client: run stopped``).  The record
goes to this process's sink; locust's own stats count it once, as entry
``<scenario>`` with ``request_type`` = mode and the E2E latency as its response
time (TTFT, ITL, TPOT: the web UI's llmload tab, ``llmload.webui``).

What a user does is read from the process's ``LoadContext``: the current
phase (name, mode, warm-up flag), closed-loop pacing (start-to-start; each
user's first request at a seeded offset inside one interval unless
``--first-start together``) or the open-loop arrival schedule.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import gevent
from gevent import GreenletExit
from locust import User, task

from llmload.loadtests.measure.adapters import get_adapter
from llmload.loadtests.measure.adapters.base import Adapter, Prompt, follow_up_of
from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.measure.timing import RecordMeta, StreamTimer
from llmload.loadtests.run.context import context_of
from llmload.loadtests.run.phases import Phase
from llmload.loadtests.run.shapes import first_start_offset, spawn_window
from llmload.loadtests.transport.target import clock, perform

CANCELLED = "cancelled by the client: run stopped"


class RequestFailed(Exception):
    """What locust's stats show for a failed request."""


class LLMUser(User):
    """A chat client: closed loop with start-to-start pacing, or open-loop arrivals."""

    def on_start(self) -> None:
        ctx = context_of(self.environment)
        self.ctx = ctx
        self.index = ctx.next_user_index()
        self.adapter: Adapter = get_adapter(ctx.connection.protocol)
        self.follow_up = follow_up_of(self.adapter)
        self.http = ctx.target.user_client()
        self.prompts = ctx.workload.for_user(self.index)
        self.last_start: float | None = None
        self.slot: tuple[int, float] | None = None

    def on_stop(self) -> None:
        self.http.close()

    def wait_time(self) -> float:
        ctx = self.ctx
        if ctx.schedule is not None:
            self.slot = ctx.schedule.claim()
            if self.slot is None:
                return 0.5  # the phase's arrivals are all handed out: idle until stopped
            return max(0.0, ctx.phase_t0 + self.slot[1] - clock())
        if self.last_start is None:
            opts = ctx.load
            if opts.first_start == "together":
                return 0.0
            window = spawn_window(opts.users, opts.spawn_rate)
            return first_start_offset(opts.seed, self.index, opts.pacing, window)
        return max(0.0, self.last_start + ctx.load.pacing - clock())

    @task
    def chat(self) -> None:
        ctx = self.ctx
        phase = ctx.phase
        if phase is None or not ctx.accepting or ctx.held:
            gevent.sleep(0.1)
            return
        if ctx.schedule is None:
            if not ctx.take():
                gevent.sleep(0.2)  # the phase's requests are all started: idle until stopped
                return
            prompt = ctx.draw(self.prompts)
            if prompt is None:  # nothing drawn fits the target's context
                ctx.give_back()
                gevent.sleep(0.5)
                return
            self.issue(phase, prompt, self.prompts)
            return
        slot, self.slot = self.slot or ctx.schedule.claim(), None
        if slot is None:
            return
        index, offset = slot
        intended = ctx.phase_t0 + offset
        gevent.sleep(max(0.0, intended - clock()))
        while ctx.held and ctx.accepting:  # the master is behind: the send waits (and is late)
            gevent.sleep(0.05)
        if not ctx.accepting:
            return
        prompt = ctx.draw(ctx.workload.for_user(index))
        if prompt is not None:
            self.issue(phase, prompt, None, intended=intended)

    def issue(
        self, phase: Phase, prompt: Prompt, prompts: Any, intended: float | None = None
    ) -> RequestRecord:
        """Send one prompt; emit its record and locust events; return the record."""
        ctx = self.ctx
        mode = phase.mode
        call = self.adapter.build(prompt, mode=mode, model=ctx.model, options=ctx.request_options())
        request_id = uuid.uuid4().hex
        if ctx.announce is not None:
            ctx.announce(
                {
                    "request_id": request_id,
                    "phase": phase.name,
                    "scenario": prompt.scenario,
                    "mode": mode,
                    "endpoint": self.adapter.endpoint,
                    "started_at": time.time(),
                    "turn": prompt.turn,
                    "user_id": self.index,
                    "warmup": phase.warmup,
                }
            )
        ctx.sink.on_request_start(mode, prompt.scenario, self.adapter.endpoint)
        ctx.inflight += 1
        ctx.issued[phase.name] = ctx.issued.get(phase.name, 0) + 1
        started_at = time.time()
        t0 = clock()
        self.last_start = t0
        meta = RecordMeta(
            request_id=request_id,
            phase=phase.name,
            scenario=prompt.scenario,
            mode=mode,
            endpoint=self.adapter.endpoint,
            started_at=started_at,
            schedule_delay_s=None if intended is None else max(0.0, t0 - intended),
            turn=prompt.turn,
            worker=ctx.worker,
            user_id=self.index,
            warmup=phase.warmup,
        )
        timer = StreamTimer(
            self.adapter, t0, tokenizer=ctx.tokenizer, max_event=ctx.target.max_event_bytes
        )
        try:
            status, error = perform(self.http, ctx.target, call, timer, self.follow_up)
        except GreenletExit:
            record = timer.finish(clock(), meta, status="disconnect", error=CANCELLED)
            self._done(record, clock() - t0, None)
            raise
        except Exception as exc:  # a bug in an adapter or the client: still one record
            status, error = "protocol", f"{type(exc).__name__}: {exc}"
        t_end = clock()
        record = timer.finish(t_end, meta, status=status, error=error)
        self._done(record, t_end - t0, prompts, timer.text)
        return record

    def _done(self, record: RequestRecord, elapsed: float, prompts: Any, text: str = "") -> None:
        ctx = self.ctx
        ctx.inflight -= 1
        ctx.sink.on_record(record)
        if prompts is not None and record.ok:
            prompts.record_reply(text)
        failure = None if record.ok else RequestFailed(f"{record.status}: {record.error}"[:300])
        self.environment.events.request.fire(
            request_type=record.mode,
            name=record.scenario,
            response_time=(record.e2e_s if record.e2e_s is not None else elapsed) * 1000.0,
            response_length=record.output_tokens or 0,
            exception=failure,
            context={},
        )
