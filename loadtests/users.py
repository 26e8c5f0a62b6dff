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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent import GreenletExit
from locust import User, task

from loadtests.adapters import get_adapter
from loadtests.adapters.base import Adapter, Prompt, follow_up_of
from loadtests.fit import ContextFit
from loadtests.http import Target, clock, perform
from loadtests.phases import Phase, shard_share
from loadtests.plan import ConnectionOptions, LoadOptions, WorkloadOptions
from loadtests.record import RequestRecord
from loadtests.shapes import ArrivalSchedule, first_start_offset, spawn_window
from loadtests.sinks import RecordSink
from loadtests.timing import RecordMeta, StreamTimer

#: warm-up users draw prompts from a separate range, so measured phases do not repeat them
WARMUP_USER_OFFSET = 1_000_000
CANCELLED = "cancelled by the client: run stopped"
#: prompts drawn per request at most, looking for one that fits the target's context
MAX_DRAWS = 20


class RequestFailed(Exception):
    """What locust's stats show for a failed request."""


@dataclass
class LoadContext:
    """Per-process state shared by the users: what to send, where, and to whom it goes.

    Of the run's options it holds the three parts the users read: ``connection``
    (protocol, Gradio API name), ``load`` (users, rate, arrivals, pacing, first
    start, seed) and ``sampling`` (the workload options: temperature, ignore_eos).
    """

    connection: ConnectionOptions
    load: LoadOptions
    sampling: WorkloadOptions
    target: Target
    workload: Any
    sink: RecordSink
    model: str
    worker: str = "local"
    shard: int = 0
    shards: int = 1
    tokenizer: Callable[[str], int] | None = None
    phase: Phase | None = None
    phase_t0: float = 0.0
    schedule: ArrivalSchedule | None = None
    inflight: int = 0
    issued: dict[str, int] = field(default_factory=dict)
    #: closed loop with a request budget: requests this process may still start in the phase
    budget: int | None = None
    #: False once the phase is stopping: no new request starts (locust's kill is asynchronous)
    accepting: bool = False
    #: a distributed worker's forwarder: told of each request (id, labels, start time) before
    #: its bytes leave, so the master can account for it should this process die
    announce: Callable[[dict[str, Any]], None] | None = None
    #: the target's context length, when it tells one: prompts trimmed or skipped to fit
    fit: ContextFit | None = None
    #: adapter options read from the target itself (``loadtests.discovery``)
    adapter_options: dict[str, Any] = field(default_factory=dict)
    _next_user: int = 0

    def watch(self, environment: Any) -> None:
        """Stop accepting new requests as soon as locust starts stopping the users."""
        bind(environment, self)
        environment.events.test_stopping.add_listener(lambda **_kw: self.stop_accepting())

    def stop_accepting(self) -> None:
        """The phase is ending: users finish what they have in flight and send nothing new."""
        self.accepting = False

    def request_options(self) -> dict[str, Any]:
        """Options for ``Adapter.build`` (temperature, ignore_eos, seed)."""
        opts: dict[str, Any] = {}
        if self.sampling.temperature is not None:
            opts["temperature"] = self.sampling.temperature
        if self.sampling.ignore_eos:
            opts["ignore_eos"] = True
        if self.connection.api_name:
            opts["api_name"] = self.connection.api_name
        opts.update(self.adapter_options)
        return opts

    def draw(self, source: Any) -> Prompt | None:
        """The next prompt of ``source`` that fits the target's context (None: none of a few)."""
        for _ in range(MAX_DRAWS):
            prompt: Prompt = source.next()
            if self.fit is None:
                return prompt
            fitted = self.fit.fit(prompt)
            if fitted is not None:
                return fitted
        return None

    def begin_phase(self, phase: Phase) -> None:
        """Start a phase in this process: user numbering restarts, so prompts repeat exactly."""
        self.phase = phase
        self.phase_t0 = clock()
        self.accepting = True
        self._next_user = 0
        self.issued.setdefault(phase.name, 0)
        self.budget = shard_share(phase.requests, self.shard, self.shards)
        _, rate = phase.load(self.load.users, self.load.rate)
        if rate is not None:
            self.schedule = ArrivalSchedule(
                rate,
                self.load.arrival,
                self.load.seed,
                phase.duration,
                self.shard,
                self.shards,
                limit=phase.requests,
            )
        else:
            self.schedule = None

    def take(self) -> bool:
        """Closed loop: may a user start another request in this phase (budget left)?"""
        if self.budget is None:
            return True
        if self.budget <= 0:
            return False
        self.budget -= 1
        return True

    def give_back(self) -> None:
        """Closed loop: a ``take`` that sent nothing (its prompt did not fit)."""
        if self.budget is not None:
            self.budget += 1

    def next_user_index(self) -> int:
        """A run-wide user number: shard ``k`` of ``n`` numbers its users ``k, k+n, ...``."""
        index = self._next_user * self.shards + self.shard
        self._next_user += 1
        if self.phase is not None and self.phase.warmup:
            index += WARMUP_USER_OFFSET
        return index


_CONTEXTS: dict[int, LoadContext] = {}


def bind(environment: Any, context: LoadContext) -> None:
    """Make ``context`` the one the users of ``environment`` read."""
    _CONTEXTS[id(environment)] = context


def context_of(environment: Any) -> LoadContext:
    """The context bound to a locust environment."""
    return _CONTEXTS[id(environment)]


class LLMUser(User):
    """A chat client: closed loop with start-to-start pacing, or open-loop arrivals."""

    def on_start(self) -> None:
        ctx = context_of(self.environment)
        self.ctx = ctx
        self.index = ctx.next_user_index()
        self.adapter: Adapter = get_adapter(ctx.connection.protocol)
        self.follow_up = follow_up_of(self.adapter)
        self.http = ctx.target.session()
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
        if phase is None or not ctx.accepting:
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
                {"request_id": request_id, "phase": phase.name, "scenario": prompt.scenario,
                 "mode": mode, "endpoint": self.adapter.endpoint, "started_at": time.time(),
                 "turn": prompt.turn, "user_id": self.index, "warmup": phase.warmup}
            )  # fmt: skip
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
        timer = StreamTimer(self.adapter, t0, tokenizer=ctx.tokenizer)
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
