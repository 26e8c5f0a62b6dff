"""What a load-generating process needs before its users start: a reachable target and a context.

``prepare`` resolves a run once, up front, into one frozen ``ResolvedRun``: the
options as given, where the files go, the connected target (and the
``--baseline-target``), the model, what the target says of itself
(``TargetFacts``: context length, adapter options, its ``/tokenize``; its
version) and this process's ``LoadContext``, the per-process state the users read
(``loadtests.run.users``).  The run reads that value; nothing is discovered
again.  A distributed worker builds its own context from the facts the master
resolved (``build_context(..., facts=...)``), so every process sends alike.
``UsageError`` is the one way any of it reports a bad option or an unreachable
target (exit code 2).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from llmload.loadtests.measure.adapters.base import Prompt, pooled, sends_messages, streams
from llmload.loadtests.measure.adapters.pooling import prompt_text
from llmload.loadtests.options import (
    MODES,
    ConnectionOptions,
    LoadOptions,
    RunOptions,
    WorkloadOptions,
)
from llmload.loadtests.redact import redact_url
from llmload.loadtests.run.phases import BASELINE, RUN, Phase, shard_share
from llmload.loadtests.run.shapes import ArrivalSchedule
from llmload.loadtests.run.sinks import RecordSink
from llmload.loadtests.transport.discovery import TargetFacts, discover, server_version
from llmload.loadtests.transport.target import Target, TargetUnreachable, clock
from llmload.loadtests.transport.tokenize import RemoteCounter, TokenizeRoute
from llmload.loadtests.workload import tokencount
from llmload.loadtests.workload.build import build_workload
from llmload.loadtests.workload.fit import ContextFit
from llmload.loadtests.workload.images import ImageMaker, parse_image_counts, parse_image_size
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
    #: ``--images``: what each drawn prompt is sent with
    images: ImageMaker | None = None
    #: embeddings and rerank: texts drawn for each request (``--batch-size``); 0: none
    batch: int = 0
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
        if self.connection.responses_chain != "resend":
            opts["chain"] = self.connection.responses_chain
        opts.update(self.adapter_options)
        return opts

    def draw(self, source: Any) -> Prompt | None:
        """The next prompt of ``source`` that fits the target's context (None: none of a few)."""
        if self.batch:  # embeddings or rerank: the prompt and its inputs, as they are
            first: Prompt = source.next()
            texts = tuple(prompt_text(source.next()) for _ in range(self.batch))
            return replace(first, inputs=texts)
        for _ in range(MAX_DRAWS):
            # images first: the fit counts their tokens too
            prompt: Prompt = self._with_images(source.next())
            if self.fit is None:
                return prompt
            fitted = self.fit.fit(prompt)
            if fitted is not None:
                return fitted
        return None

    def _with_images(self, prompt: Prompt) -> Prompt:
        """The prompt with its images (``--images``); as it is without."""
        if self.images is None:
            return prompt
        return replace(prompt, images=self.images.draw())

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


def connect_target(connection: ConnectionOptions, url: str = "") -> Target:
    """The target (``url``: another one with the same connection settings), its
    reachability checked (and this process's client warmed up)."""
    if not (url or connection.target):
        raise UsageError("--target URL is required (`loadtest` starts the bundled server)")
    try:
        target = Target.from_options(connection, url)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        target.probe(timeout=5.0)
    except TargetUnreachable as exc:
        raise UsageError(str(exc)) from None
    return target


@dataclass(frozen=True)
class ResolvedRun:
    """A run resolved once, before any user starts (``prepare``); what the run reads."""

    opts: RunOptions
    #: where the run's files go (``--out``, or the default the runner chose)
    out_dir: Path
    target: Target
    model: str
    facts: TargetFacts
    #: this process's users' state (mutable: phases, budgets; the reference is fixed)
    ctx: LoadContext
    #: the target's version where it says one (run.json; the gate's fingerprint)
    server: dict[str, Any] | None = None
    #: ``--baseline-target``: what run.json says of it
    baseline: dict[str, Any] | None = None


def prepare(opts: RunOptions, out_dir: Path, sink: RecordSink) -> ResolvedRun:
    """Resolve the run: connect its target(s), name the model, ask the target about
    itself once, build this process's context (``UsageError``: a bad option or target)."""
    connection = opts.connection
    target = connect_target(connection)
    base_url = connection.baseline_target
    base = connect_target(connection, base_url) if base_url else None
    model = connection.model or target.detect_model() or "default"
    facts = _discover(target, connection, model)
    for note in facts.notes:
        print(note, file=sys.stderr, flush=True)
    opts = _streamless(opts)
    ctx = build_context(opts, target, model, sink, facts=facts)
    gradio = connection.protocol == "gradio"
    server = None if gradio else server_version(target)
    baseline: dict[str, Any] | None = None
    if base is not None:
        base_model = connection.model or base.detect_model() or "default"
        ctx.targets[BASELINE] = (base, base_model)
        baseline = {"target": redact_url(base.base_url), "model": base_model}
        if not gradio and (version := server_version(base)) is not None:
            baseline["server"] = version
    return ResolvedRun(opts, out_dir, target, model, facts, ctx, server, baseline)


def _streamless(opts: RunOptions) -> RunOptions:
    """A protocol without a stream (embeddings, rerank) runs its sync phase alone: the
    default ``--modes`` becomes ``sync`` (said once); asking for ``stream`` is an error."""
    protocol = opts.connection.protocol
    load = opts.load
    if streams(protocol) or "stream" not in load.modes:
        if opts.workload.batch_size > 1 and not pooled(protocol):
            raise UsageError(f"--batch-size: --protocol {protocol} sends one prompt a request")
        return opts
    if load.modes != list(MODES):
        raise UsageError(f"--protocol {protocol} has no stream: give --modes sync")
    print(f"note: {protocol} has no stream: one sync phase (--modes sync)", file=sys.stderr)
    return replace(opts, load=replace(load, modes=["sync"]))


def _discover(target: Target, connection: ConnectionOptions, model: str) -> TargetFacts:
    try:
        return discover(target, connection.protocol, model, connection.api_name)
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from None


def facts_message(facts: TargetFacts) -> dict[str, Any]:
    """``facts`` as the master sends them to its workers (JSON; notes stay with the master)."""
    route = facts.tokenize
    return {
        "adapter_options": facts.adapter_options,
        "context_limit": facts.context_limit,
        "tokenize": None if route is None else asdict(route),
    }


def facts_of(message: dict[str, Any]) -> TargetFacts:
    """What ``facts_message`` sent."""
    route = message.get("tokenize")
    return TargetFacts(
        adapter_options=dict(message.get("adapter_options") or {}),
        context_limit=message.get("context_limit"),
        tokenize=None if route is None else TokenizeRoute(**route),
    )


def _images(opts: RunOptions, shard: int) -> ImageMaker | None:
    """``--images``' maker for this process, or None; only for a protocol that sends chat
    messages (where an image is a content part)."""
    w = opts.workload
    if w.images is None:
        return None
    if not sends_messages(opts.connection.protocol):
        raise UsageError(
            f"--images: --protocol {opts.connection.protocol} sends no chat messages; use "
            "openai-chat, openai-responses or anthropic-messages"
        )
    counts, size = parse_image_counts(w.images), parse_image_size(w.image_size)
    return ImageMaker(counts, size, w.image_url, seed=opts.load.seed, shard=shard)


def build_context(
    opts: RunOptions,
    target: Target,
    model: str,
    sink: RecordSink,
    worker: str = "local",
    shard: int = 0,
    shards: int = 1,
    *,
    facts: TargetFacts,
) -> LoadContext:
    """What this process's users need: workload, tokenizer, target, sink; ``facts``: what
    the target said of itself (``prepare``; a worker: the master's)."""
    tokenizer = None
    w = opts.workload
    try:
        workload = build_workload(w, opts.load.seed)
        if w.tokenizer:
            tokenizer = tokencount.load(w.tokenizer)
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from None
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
        images=_images(opts, shard),
        batch=w.batch_size if pooled(opts.connection.protocol) else 0,
    )
    ctx.targets[RUN] = (target, model)
    return ctx
