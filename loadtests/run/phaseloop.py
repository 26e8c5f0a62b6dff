"""One run's phase loop: drive the shape, mark phases, check what arrived.

``PhaseLoop.run_phase`` polls the phase's shape (``loadtests.run.shapes``), tells the
driver how many users to run, prints the status line, and at the end stops
the users (draining in-flight requests, or cancelling them on Ctrl-C) and
collects the phase's records before marking the phase ended.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import gevent
from gevent.event import Event

from llmload.loadtests.options import LoadOptions, RunOptions, warmup_seconds
from llmload.loadtests.percentile import percentile_of
from llmload.loadtests.run.hub import RecordHub
from llmload.loadtests.run.phases import BASELINE, BASELINE_PREFIX, Phase
from llmload.loadtests.run.shapes import ArrivalSchedule, Constant, PhaseShape, make_shape
from llmload.loadtests.run.status import StatusLine

EXIT_INTERRUPTED = 130
#: open loop: a p95 schedule delay above this means the rate was not kept
LATE_P95_S = 0.05


class Driver(Protocol):
    """Where the users run: this process, or locust workers."""

    #: how many load-generator processes share the open-loop schedule
    shards: int

    def begin(self, phase: Phase) -> None: ...

    def set_users(self, users: int, spawn_rate: float) -> None: ...

    def user_count(self) -> int: ...

    def stop(self, force: bool) -> None: ...

    def abort(self) -> None:
        """Cancel the users' requests now (Ctrl-C), without blocking."""
        ...

    def finish(self, phase: Phase) -> int: ...

    def nothing_fits(self) -> bool:
        """No prompt drawn so far fits the target's context (``ContextFit.nothing_fits``)."""
        ...

    def close(self) -> None: ...


def plan_phases(opts: LoadOptions, timed: int | None = None, baseline: bool = False) -> list[Phase]:
    """Warm-up (optional, in the first mode), then one phase per mode, ``--repeat`` times.

    ``timed``: the requests of a trace replay (``--dataset trace``); each measured
    phase then sends them at the trace's times and ends when their records are in (the
    warm-up sends lap 1's texts, ``Phase.lap``: the measured phases' are not its own).
    Every measured phase is at lap 0: each sends the same prompts (sync and stream,
    repeats, the baseline's twins compare like with like).
    Repeats are named ``stream-1``, ``stream-2``, ...  With a baseline target
    (``baseline``) every phase has a twin on that target (``baseline-stream-1``) right
    beside it, so the machine's drift touches both alike; the twin goes second in odd
    repeats and first in even ones (A/B, B/A, A/B: a crossover), so a drift that runs
    one way through the run, or whatever going second does to a phase, does not lean
    every pair the same way.
    """
    is_timed = timed is not None
    requests = opts.num_prompts if timed is None else min(timed, opts.num_prompts or timed)
    phases = []

    def add(phase: Phase, twin_first: bool = False) -> None:
        if not baseline:
            phases.append(phase)
            return
        twin = replace(phase, name=BASELINE_PREFIX + phase.name, target=BASELINE)
        phases.extend((twin, phase) if twin_first else (phase, twin))

    if warmup_seconds(opts) > 0:
        warm = Phase(
            "warmup",
            opts.modes[0],  # type: ignore[arg-type]  # --modes values are checked against MODES, typed list[str]
            warmup_seconds(opts),
            warmup=True,
            timed=is_timed,
            lap=1 if is_timed else 0,
        )
        add(warm)
    for r in range(1, opts.repeat + 1):
        for m in opts.modes:
            name = m if opts.repeat == 1 else f"{m}-{r}"
            phase = Phase(name, m, opts.duration, requests=requests, timed=is_timed)  # type: ignore[arg-type]  # --modes values are checked against MODES, typed list[str]
            add(phase, twin_first=r % 2 == 0)
    return phases


def phase_shape(opts: LoadOptions, phase: Phase) -> PhaseShape:
    """The user-count shape of one phase (open loop, or a load of its own: all users at once)."""
    users, rate = phase.load(opts.users, opts.rate)
    if rate is not None or phase.timed:
        return Constant(users, phase.duration, min(100.0, max(opts.spawn_rate, users)))
    if phase.users is not None:
        return Constant(users, phase.duration, max(opts.spawn_rate, float(users)))
    return make_shape(
        opts.shape, users=opts.users, spawn_rate=opts.spawn_rate, duration=phase.duration
    )


def scheduled_arrivals(opts: LoadOptions, phase: Phase, shards: int) -> int:
    """How many open-loop arrivals the seeded schedules hold for a phase."""
    _, rate = phase.load(opts.users, opts.rate)
    assert rate is not None
    total = 0
    for shard in range(shards):
        sched = ArrivalSchedule(
            rate, opts.arrival, opts.seed, phase.duration, shard, shards, phase.requests
        )
        while sched.claim() is not None:
            total += 1
    return total


def late_hint(users: int, peak: int, shards: int = 1) -> str:
    """Why an open loop's sends were late: every user busy (the concurrency cap) — or, the
    users never all busy (``peak`` requests in flight at most; one process, which sees every
    start), the load generator's own delay."""
    if shards > 1 or peak >= users - users // 10:
        return "raise --users, the open-loop concurrency cap"
    return (
        f"at most {peak} of the {users} users were busy: the load generator itself fell "
        "behind — see its harness health"
    )


class PhaseLoop:
    """One run: the hub and its sinks, the phases, the interrupt flag."""

    def __init__(self, opts: RunOptions, hub: RecordHub, status: StatusLine) -> None:
        self.opts = opts
        self.load = opts.load  # the part the phases read
        self.hub = hub
        self.status = status
        self.interrupted = False
        #: why the run stopped on its own (a failed write), None for Ctrl-C and completion
        self.stopped_by: str | None = None
        self.wake = Event()
        self.warnings: list[str] = []
        #: called with each phase once its records are in (e.g. to save locust's stats)
        self.after_phase: list[Callable[[Phase], None]] = []
        self._users = -1
        self.driver: Driver | None = None

    def interrupt(self) -> None:
        """Ctrl-C / SIGTERM: stop at once (a second Ctrl-C exits without cleanup)."""
        if self.interrupted and self.stopped_by is None:
            os._exit(EXIT_INTERRUPTED)
        self.interrupted = True
        if self.driver is not None:
            self.driver.abort()  # also cuts short a phase-end drain already under way
        self.wake.set()

    def stop_for(self, reason: str) -> None:
        """The load generator's own failure (its files cannot be written): stop the way an
        interrupt does — no new requests, those in flight cut and recorded as far as
        they can be — but never exit from here, whatever else comes."""
        if self.stopped_by is not None:
            return
        self.stopped_by = reason
        self.interrupted = True
        if self.driver is not None:
            gevent.spawn(self.driver.abort)  # not from inside the sink that failed
        self.wake.set()

    def install_signals(self) -> None:
        """Route SIGINT/SIGTERM to ``interrupt`` on the gevent hub."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            gevent.signal_handler(sig, self.interrupt)

    def _users_changed(self, driver: Driver) -> None:
        n = driver.user_count()
        if n != self._users:
            self._users = n
            self.hub.on_users(n)

    def run_phase(self, driver: Driver, phase: Phase, cooldown: float) -> None:
        """Drive one phase to its end (or the interrupt), then collect its records."""
        if cooldown > 0 and not self.interrupted:
            self.wake.clear()
            self.wake.wait(cooldown)
        if self.interrupted:
            return
        shape = phase_shape(self.load, phase)
        self.driver = driver
        driver.begin(phase)
        self.status.begin(phase.name, phase.mode, phase.duration, phase.requests)
        self.hub.on_phase(phase.name, phase.mode, "start", time.time())
        started = time.perf_counter()
        last: tuple[int, float] | None = None
        next_status = 0.0
        self.wake.clear()
        while not self.interrupted:
            elapsed = time.perf_counter() - started
            tick = shape.at(elapsed)
            if tick is None or self._all_recorded(phase) or self._cannot_finish(phase, driver):
                break
            if tick != last:
                driver.set_users(*tick)
                self.status.target_users = tick[0]
                last = tick
            self._users_changed(driver)
            if elapsed >= next_status:
                self.status.tick()
                next_status = elapsed + self.opts.output.status_interval
            self.wake.wait(min(0.2, max(0.0, phase.duration - elapsed)))
        driver.stop(force=self.interrupted)
        issued = driver.finish(phase)
        self._users_changed(driver)
        self.status.tick(force=True)
        self.status.end_line()
        self.hub.on_phase(phase.name, phase.mode, "end", time.time())
        self._check_phase(phase, issued, driver)
        for hook in self.after_phase:
            hook(phase)

    def _all_recorded(self, phase: Phase) -> bool:
        """``--num-prompts``: every request of the phase has its record."""
        stats = self.status.current
        return phase.requests is not None and stats is not None and stats.requests >= phase.requests

    @staticmethod
    def _cannot_finish(phase: Phase, driver: Driver) -> bool:
        """``--num-prompts``: the phase's requests can no longer all be sent.

        A phase without a time limit would wait for them forever.  Each worker issues
        its own share of the requests, so one lost takes its share with it (the run
        stops after this phase anyway, ``runner.worker_lost``); and when no prompt
        drawn fits the target's context, nothing is sent (the run then fails, saying so).
        """
        return phase.requests is not None and (
            bool(getattr(driver, "lost_workers", None)) or driver.nothing_fits()
        )

    def _check_phase(self, phase: Phase, issued: int, driver: Driver) -> None:
        stats = self.status.current
        got = stats.requests if stats is not None else 0
        if got != issued and self.stopped_by is not None:
            self._warn(
                f"phase {phase.name}: {issued - got} of its {issued} requests were in flight "
                "when the run stopped for a failed write: cut, with no record"
            )
        elif got != issued:
            self._warn(f"phase {phase.name}: {issued} requests issued but {got} records arrived")
        users, rate = phase.load(self.load.users, self.load.rate)
        if (rate is None and not phase.timed) or self.interrupted or stats is None:
            return
        if rate is not None:
            expected = scheduled_arrivals(self.load, phase, driver.shards)
            what = f"target rate {rate:g}/s"
        else:
            expected = phase.requests or got
            what = "the trace's timing"
        late = percentile_of(stats.delays, 95) or 0.0
        if got < 0.95 * expected or late > LATE_P95_S:
            self._warn(
                f"phase {phase.name}: {what} not achieved: "
                f"{got} of {expected} scheduled requests sent, schedule delay p95 "
                f"{late * 1000:.0f} ms ({late_hint(users, stats.peak_inflight, driver.shards)})"
            )

    def _warn(self, text: str) -> None:
        self.warnings.append(text)
        print(f"warning: {text}", file=sys.stderr, flush=True)
