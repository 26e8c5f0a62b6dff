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

The first-start offset is waited in locust's own wait, before the first
request: locust runs a user's task first and calls ``wait_time`` after it, so
the user's first task call only arms the offset and returns.  Waiting there, not
with a sleep inside the task, also lets a phase end stop the user at once.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import gevent
from gevent import GreenletExit
from locust import User, task

from llmload.loadtests.measure.adapters import get_adapter
from llmload.loadtests.measure.adapters.base import Adapter, HttpCall, Prompt, follow_up_of
from llmload.loadtests.measure.adapters.toolcalls import ToolCallTap
from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.measure.timing import RecordMeta, StreamTimer
from llmload.loadtests.run.context import context_of
from llmload.loadtests.run.phases import Phase
from llmload.loadtests.run.sessions import run_session
from llmload.loadtests.run.shapes import first_start_offset, spawn_batch, spawn_window
from llmload.loadtests.transport.target import clock, perform, wall
from llmload.loadtests.workload.agent import AgentSessions, AgentWorkload

CANCELLED = "cancelled by the client: run stopped"
#: a trace replay's send: the event loop's timers wake up to a millisecond late (epoll's
#: resolution), so the last stretch before a send time is spent yielding instead
SPIN_S = 0.0015


def sleep_until(deadline: float, spin: float = 0.0) -> None:
    """Sleep until ``clock()`` reaches ``deadline``; the last ``spin`` seconds by yielding to
    the other greenlets (no timer), so the wake-up is not late by the timer's resolution."""
    gevent.sleep(max(0.0, deadline - spin - clock()))
    while clock() < deadline:
        gevent.sleep(0)


class RequestFailed(Exception):
    """What locust's stats show for a failed request."""


class LLMUser(User):
    """A chat client: closed loop with start-to-start pacing, or open-loop arrivals."""

    def on_start(self) -> None:
        ctx = context_of(self.environment)
        self.ctx = ctx
        self.index = ctx.next_user_index()
        self.adapter: Adapter = get_adapter(ctx.connection.protocol)
        #: agent sessions: the adapter that also keeps each answer's tool calls
        self.tap: ToolCallTap | None = None
        if isinstance(ctx.workload, AgentWorkload):
            self.adapter = self.tap = ToolCallTap(self.adapter)
        self.follow_up = follow_up_of(self.adapter)
        self.http = ctx.target.user_client()
        self.prompts = ctx.user_prompts(self.index)
        self.last_start: float | None = None
        self.slot: tuple[int, float] | None = None
        #: open loop: the claimed arrival's prompt, made before the wait for its send time,
        #: and where it came from (an agent's sessions continue from it)
        self.pending: Prompt | None = None
        self.source: Any = None
        #: closed loop: seconds to wait before the first request (``--first-start``)
        self.first_wait = 0.0
        opts = ctx.load
        if opts.first_start != "together":
            window = spawn_window(opts.users, opts.spawn_rate)
            batch = spawn_batch(opts.users, opts.spawn_rate)
            self.first_wait = first_start_offset(opts.seed, self.index, opts.pacing, window, batch)

    def on_stop(self) -> None:
        self.http.close()

    def wait_time(self) -> float:
        ctx = self.ctx
        if ctx.schedule is not None:
            self.slot = ctx.schedule.claim()
            if self.slot is None:
                return 0.5  # the phase's arrivals are all handed out: idle until stopped
            self.source = ctx.arrival_prompts(self.slot[0])
            self.pending = ctx.draw(self.source)
            spin = SPIN_S if ctx.phase is not None and ctx.phase.timed else 0.0
            return max(0.0, ctx.phase_t0 + self.slot[1] - spin - clock())
        if self.last_start is None:
            wait, self.first_wait = self.first_wait, 0.0
            return wait
        return max(0.0, self.last_start + ctx.load.pacing - clock())

    @task
    def chat(self) -> None:
        ctx = self.ctx
        phase = ctx.phase
        if phase is None or not ctx.accepting or ctx.held:
            gevent.sleep(0.1)
            return
        if ctx.schedule is None:
            if self.first_wait > 0.0:
                return  # the first request waits for this user's offset (wait_time)
            if not ctx.take():
                gevent.sleep(0.2)  # the phase's requests are all started: idle until stopped
                return
            prompt = ctx.draw(self.prompts)
            if prompt is None:  # nothing drawn fits the target's context
                ctx.give_back()
                gevent.sleep(0.5)
                return
            if isinstance(self.prompts, AgentSessions):
                start = clock()
                self.session(phase, self.prompts, prompt, None)
                self.last_start = start  # --pacing spaces the sessions' starts
                return
            self.issue(phase, prompt, self.prompts)
            return
        slot, prompt, source = self.slot, self.pending, self.source
        self.slot = self.pending = self.source = None
        if slot is None:  # the first arrival (later ones are claimed in wait_time)
            slot = ctx.schedule.claim()
            if slot is None:
                return
            source = ctx.arrival_prompts(slot[0])
            prompt = ctx.draw(source)
        # the prompt and its request body are made before the wait: their making does not
        # make the send late
        intended = ctx.phase_t0 + slot[1]
        call = None
        if prompt is not None and not isinstance(source, AgentSessions):
            call = self.adapter.build(
                prompt, mode=phase.mode, model=ctx.model, options=ctx.request_options()
            )
        sleep_until(intended, SPIN_S if phase.timed else 0.0)
        while ctx.held and ctx.accepting:  # the master is behind: the send waits (and is late)
            gevent.sleep(0.05)
        if not ctx.accepting:
            return
        if prompt is not None and isinstance(source, AgentSessions):
            self.session(phase, source, prompt, intended)  # --rate: sessions per second
        elif prompt is not None:
            self.issue(phase, prompt, None, intended=intended, call=call)

    def session(
        self, phase: Phase, sessions: AgentSessions, first: Prompt, intended: float | None
    ) -> None:
        """One agent session from ``first`` to its final answer (``loadtests.run.sessions``)."""
        assert self.tap is not None

        def issue(prompt: Prompt, at: float | None) -> RequestRecord:
            return self.issue(phase, prompt, None, intended=at)

        run_session(issue, self.tap, self.ctx, sessions, first, intended)

    def issue(
        self,
        phase: Phase,
        prompt: Prompt,
        prompts: Any,
        intended: float | None = None,
        call: HttpCall | None = None,
    ) -> RequestRecord:
        """Send one prompt (``call``: its request, when built ahead); emit its record and
        locust events; return the record."""
        ctx = self.ctx
        mode = phase.mode
        if call is None:
            call = self.adapter.build(
                prompt, mode=mode, model=ctx.model, options=ctx.request_options()
            )
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
                    "session_id": prompt.session_id,
                    "step": prompt.step,
                    "images": len(prompt.images),
                    "inputs": len(prompt.inputs) or None,
                }
            )
        ctx.sink.on_request_start(mode, prompt.scenario, self.adapter.endpoint)
        ctx.inflight += 1
        ctx.issued[phase.name] = ctx.issued.get(phase.name, 0) + 1
        t0 = clock()
        started_at = wall(t0)
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
            session_id=prompt.session_id,
            step=prompt.step,
            images=len(prompt.images),
            inputs=len(prompt.inputs) or None,
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
