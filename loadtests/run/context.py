"""What a load-generating process needs before its users start: a reachable target and a context.

``LoadContext`` is the per-process state the users read (``loadtests.run.users``);
``connect_target`` and ``build_context`` are shared by the local runner and
by every distributed worker (``loadtests.run.distributed``); ``UsageError`` is the
one way either reports a bad option or an unreachable target (exit code 2).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmload.loadtests.measure.adapters.base import Prompt
from llmload.loadtests.options import ConnectionOptions, LoadOptions, RunOptions, WorkloadOptions
from llmload.loadtests.redact import redact_url
from llmload.loadtests.run.phases import BASELINE, RUN, Phase, shard_share
from llmload.loadtests.run.shapes import ArrivalSchedule
from llmload.loadtests.run.sinks import RecordSink
from llmload.loadtests.transport.discovery import discover, server_version
from llmload.loadtests.transport.target import Target, TargetUnreachable, clock
from llmload.loadtests.transport.tokenize import RemoteCounter
from llmload.loadtests.workload import tokencount
from llmload.loadtests.workload.build import build_workload
from llmload.loadtests.workload.fit import ContextFit
from llmload.loadtests.workload.replay import TraceReplay, TraceSchedule

#: warm-up users (closed loop) and arrivals (open loop) draw prompts from a separate range,
#: so measured phases do not repeat them
WARMUP_USER_OFFSET = 1_000_000
#: prompts drawn per request at most, looking for one that fits the target's context
MAX_DRAWS = 20
#: a trace replay starts this long after its phase: the users are spawned (up to 100 at
#: once) and waiting on their first arrivals, so the trace's first requests are not late
REPLAY_LEAD_S = 1.0


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
    schedule: ArrivalSchedule | TraceSchedule | None = None
    inflight: int = 0
    issued: dict[str, int] = field(default_factory=dict)
    #: closed loop with a request budget: requests this process may still start in the phase
    budget: int | None = None
    #: False once the phase is stopping: no new request starts (locust's kill is asynchronous)
    accepting: bool = False
    #: a distributed master behind on records holds its workers: no new request starts
    held: bool = False
    #: a distributed worker's forwarder: told of each request (id, labels, start time) before
    #: its bytes leave, so the master can account for it should this process die
    announce: Callable[[dict[str, Any]], None] | None = None
    #: the target's context length, when it tells one: prompts trimmed or skipped to fit
    fit: ContextFit | None = None
    #: adapter options read from the target itself (``loadtests.transport.discovery``)
    adapter_options: dict[str, Any] = field(default_factory=dict)
    #: ``--baseline-target``: each phase's target and model by ``Phase.target``
    targets: dict[str, tuple[Target, str]] = field(default_factory=dict)
    _next_user: int = 0
    #: closed loop: each user's prompt source by its index, carried on from phase to phase
    #: while ``Phase.lap`` > 0 (a capacity search's steps); a phase at lap 0 starts afresh
    _sources: dict[int, Any] = field(default_factory=dict)

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
        if self.sampling.extra_body:
            opts["extra_body"] = self.sampling.extra_body
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
        """Start a phase in this process: user numbering restarts.  At lap 0 (every phase of
        ``llmload run``) so do the users' prompts: each phase sends the same ones; a later lap
        (a capacity step) carries them on (``user_prompts``, ``arrival_prompts``)."""
        self.phase = phase
        if phase.lap == 0:
            self._sources.clear()
        if phase.target in self.targets:  # users start afresh each phase, on this target
            self.target, self.model = self.targets[phase.target]
        self.phase_t0 = clock()
        self.accepting = True
        self._next_user = 0
        self.issued.setdefault(phase.name, 0)
        self.budget = shard_share(phase.requests, self.shard, self.shards)
        _, rate = phase.load(self.load.users, self.load.rate)
        if isinstance(self.workload, TraceReplay):  # a replay: the trace's own times
            self.phase_t0 += REPLAY_LEAD_S
            self.schedule = self.workload.arrivals(
                phase.duration - REPLAY_LEAD_S,
                self.shard,
                self.shards,
                phase.requests,
                speedup=phase.speedup,
                lap=phase.lap,
            )
        elif rate is not None:
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

    def user_prompts(self, index: int) -> Any:
        """Closed loop: user ``index``'s prompt source in this phase.

        At lap 0 a fresh one (``workload.for_user(index)``: the same sequence in every phase);
        at a later lap (a capacity step) the one the user had in the steps before, carried on
        as in one long run — a deck dealt on, not restarted; a generator's next texts — and
        for a user new to the search (the load grew), one seeded with the lap.
        """
        if isinstance(self.workload, TraceReplay):  # a replay is open loop: this sends none
            return self.workload.for_user(index)
        lap = self.phase.lap if self.phase is not None else 0
        source = self._sources.get(index)
        if source is None or lap == 0:
            source = self._sources[index] = self.workload.for_user(index, lap)
        return source

    def arrival_prompts(self, index: int) -> Any:
        """Open loop: arrival ``index``'s prompt source (one prompt; an agent session).

        A trace replay's index is its request's (and lap's, ``TraceSchedule.first``).  Else
        ``workload.for_user`` of the arrival, seeded with the phase's lap (a capacity step's
        arrivals are not an earlier step's), a warm-up's in the warm-up range (the measured
        phases' arrivals are not its own).
        """
        if isinstance(self.workload, TraceReplay):
            return self.workload.for_user(index)
        phase = self.phase
        if phase is not None and phase.warmup:
            index += WARMUP_USER_OFFSET
        return self.workload.for_user(index, phase.lap if phase is not None else 0)

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


class UsageError(Exception):
    """A problem with the options or the target: one line to the user, exit code 2."""


def connect_target(opts: RunOptions) -> Target:
    """The target, its reachability checked (and this process's client warmed up)."""
    if not opts.connection.target:
        raise UsageError("--target URL is required (`loadtest` starts the bundled server)")
    try:
        target = Target.from_options(opts.connection)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        target.probe(timeout=5.0)
    except TargetUnreachable as exc:
        raise UsageError(str(exc)) from None
    return target


def add_baseline_target(opts: RunOptions, ctx: LoadContext) -> dict[str, Any] | None:
    """``--baseline-target``: connect it, give its phases to ``ctx``; what run.json says of it."""
    url = opts.connection.baseline_target
    if not url:
        return None
    base = connect_target(opts.with_(target=url))
    model = opts.connection.model or base.detect_model() or "default"
    ctx.targets[BASELINE] = (base, model)
    info: dict[str, Any] = {"target": redact_url(base.base_url), "model": model}
    if opts.connection.protocol != "gradio" and (server := server_version(base)) is not None:
        info["server"] = server
    return info


def build_context(
    opts: RunOptions,
    target: Target,
    model: str,
    sink: RecordSink,
    worker: str = "local",
    shard: int = 0,
    shards: int = 1,
) -> LoadContext:
    """What this process's users need: workload, tokenizer, target, sink."""
    tokenizer = None
    w = opts.workload
    try:
        workload = build_workload(w, opts.load.seed)
        if w.tokenizer:
            tokenizer = tokencount.load(w.tokenizer)
        facts = discover(target, opts.connection.protocol, model, opts.connection.api_name)
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from None
    if worker == "local":
        for note in facts.notes:
            print(note, file=sys.stderr, flush=True)
    limit = facts.context_limit
    # the target counts prompt tokens itself when it can (/tokenize): preferred to any estimate
    remote = None if facts.tokenize is None else RemoteCounter(target, facts.tokenize, model)
    ctx = LoadContext(
        connection=opts.connection,
        load=opts.load,
        sampling=w,
        target=target,
        workload=workload,
        sink=sink,
        model=model,
        worker=worker,
        shard=shard,
        shards=shards,
        tokenizer=tokenizer,
        fit=None if limit is None else ContextFit(limit, tokenizer, remote=remote),
        adapter_options=facts.adapter_options,
    )
    ctx.targets[RUN] = (target, model)
    return ctx
