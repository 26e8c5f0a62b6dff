"""The live status line (headless runs) and the fallback end-of-run summary.

A ``RecordSink`` that keeps per-phase counts and latencies.  ``line()`` is the
one-line view the runner prints every ``--status-interval`` seconds: phase,
elapsed/remaining, users, requests, errors, in flight, TTFT p50/p95 so far,
and the load generator's own CPU and loop lag (its busiest process, marked
``saturated`` above the line of ``loadtests.run.healthlog``).
On a terminal it rewrites itself in place; otherwise it prints a line every
``log_every`` seconds so CI logs stay short.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.percentile import percentile_of
from llmload.loadtests.run.healthlog import NOT_LOAD, saturated
from llmload.loadtests.run.sinks import HarnessHealth, NullSink


class Reservoir(list[float]):
    """A uniform random sample of at most ``size`` values (algorithm R).

    The status line sorts its samples every second on the load generator's event
    loop; a bounded sample keeps that cost fixed however long the run.
    """

    def __init__(self, size: int = 4096, seed: int = 0) -> None:
        super().__init__()
        self.size = size
        self.seen = 0
        self._rng = random.Random(seed)

    def append(self, value: float) -> None:
        self.seen += 1
        if len(self) < self.size:
            super().append(value)
            return
        j = self._rng.randrange(self.seen)
        if j < self.size:
            self[j] = value


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


@dataclass
class PhaseTally:
    """What one phase has recorded so far."""

    name: str
    mode: str
    duration: float
    #: ``--num-prompts``: the phase ends after this many records
    limit: int | None = None
    started: float = field(default_factory=time.monotonic)
    requests: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    ttft: list[float] = field(default_factory=Reservoir)
    e2e: list[float] = field(default_factory=Reservoir)
    delays: list[float] = field(default_factory=Reservoir)
    tokens: int = 0
    #: the most requests in flight at once (this process's view) while the phase ran
    peak_inflight: int = 0

    def add(self, record: RequestRecord) -> None:
        self.requests += 1
        if record.schedule_delay_s is not None:
            self.delays.append(record.schedule_delay_s)
        if not record.ok:
            self.errors[record.status] = self.errors.get(record.status, 0) + 1
            return
        if record.ttft_s is not None:
            self.ttft.append(record.ttft_s)
        if record.e2e_s is not None:
            self.e2e.append(record.e2e_s)
        self.tokens += record.output_tokens or 0


class StatusLine(NullSink):
    """Per-phase progress; prints itself when ``tick()`` is called."""

    def __init__(self, stream: TextIO | None = None, log_every: float = 10.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.log_every = log_every
        self.phases: list[PhaseTally] = []
        self.users = 0
        self.target_users = 0
        self.started = 0
        self.recorded = 0
        self._last_print = 0.0
        self._width = 0
        self.health: dict[str, HarnessHealth] = {}  # latest snapshot per process

    @property
    def current(self) -> PhaseTally | None:
        return self.phases[-1] if self.phases else None

    def begin(self, name: str, mode: str, duration: float, limit: int | None = None) -> None:
        """A phase starts (the runner knows its planned duration and request budget)."""
        self.phases.append(PhaseTally(name, mode, duration, limit))

    def on_request_start(self, mode: str, scenario: str, endpoint: str) -> None:
        self.started += 1
        phase = self.current
        if phase is not None:
            phase.peak_inflight = max(phase.peak_inflight, self.started - self.recorded)

    def on_record(self, record: RequestRecord) -> None:
        self.recorded += 1
        for phase in reversed(self.phases):
            if phase.name == record.phase:
                phase.add(record)
                return

    def on_users(self, n: int) -> None:
        self.users = n

    def on_health(self, source: str, snapshot: HarnessHealth) -> None:
        if source not in NOT_LOAD:
            self.health[source] = snapshot

    def _client(self) -> str:
        """`` | client CPU 45% lag 3 ms`` for the busiest load process ('' before any sample)."""
        if not self.health:
            return ""
        cpu = max(h.cpu_percent for h in self.health.values())
        lag = max(h.loop_lag_s for h in self.health.values())
        hot = any(saturated(h) for h in self.health.values())
        return f" | client CPU {cpu:.0f}% lag {lag * 1000:.0f} ms" + (" saturated" if hot else "")

    def line(self, now: float | None = None) -> str:
        """The one-line status of the current phase."""
        phase = self.current
        if phase is None:
            return "starting"
        now = time.monotonic() if now is None else now
        elapsed = now - phase.started
        remaining = max(0.0, phase.duration - elapsed)
        left = f"{remaining:4.0f}s left" if remaining != float("inf") else "no time limit"
        requests = f"{phase.requests}" + (f"/{phase.limit}" if phase.limit is not None else "")
        errors = sum(phase.errors.values())
        p50, p95 = _ms(percentile_of(phase.ttft, 50)), _ms(percentile_of(phase.ttft, 95))
        return (
            (
                f"[{phase.name}] {elapsed:5.0f}s elapsed {left}"
                f" | users {self.users}/{self.target_users}"
                f" | requests {requests} errors {errors} in flight {self.started - self.recorded}"
                f" | TTFT p50 {p50} ms p95 {p95} ms"
            )
            + (
                f" | schedule delay p95 {_ms(percentile_of(phase.delays, 95))} ms"
                if phase.delays
                else ""
            )
            + self._client()
        )

    def tick(self, force: bool = False) -> None:
        """Print the status line (in place on a terminal, throttled otherwise)."""
        now = time.monotonic()
        if self.tty:
            text = self.line(now)
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
            self.stream.flush()
        elif force or now - self._last_print >= self.log_every:
            self._last_print = now
            self.stream.write(self.line(now) + "\n")
            self.stream.flush()

    def end_line(self) -> None:
        """Finish an in-place line before other output."""
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0

    def summary(self) -> str:
        """A plain per-phase table (used when the reports package is unavailable)."""
        rows = [
            f"{'phase':<8} {'mode':<6} {'reqs':>6} {'errors':>6} {'TTFT p50':>9} {'TTFT p95':>9}"
            f" {'E2E p50':>8} {'tokens':>7}"
        ]
        for p in self.phases:
            rows.append(
                f"{p.name:<8} {p.mode:<6} {p.requests:>6} {sum(p.errors.values()):>6}"
                f" {_ms(percentile_of(p.ttft, 50)):>6} ms {_ms(percentile_of(p.ttft, 95)):>6} ms"
                f" {_ms(percentile_of(p.e2e, 50)):>5} ms {p.tokens:>7}"
            )
        return "\n".join(rows)


def error_rate_breach(phases: Sequence[PhaseTally], max_rate: float | None) -> str | None:
    """Why the measured phases failed too many requests, or ``None``.

    ``max_rate`` None: only a run whose every measured request failed (a wrong key, a
    dead route) breaches.  Warm-up phases are not measured and do not count.
    """
    measured = [p for p in phases if p.name != "warmup"]  # session.plan_phases names it
    total = sum(p.requests for p in measured)
    failed = sum(sum(p.errors.values()) for p in measured)
    if not total:
        return None
    classes: dict[str, int] = {}
    for p in measured:
        for status, n in p.errors.items():
            classes[status] = classes.get(status, 0) + n
    top = ", ".join(f"{k} {v}" for k, v in sorted(classes.items(), key=lambda kv: -kv[1]))
    rate = failed / total
    if max_rate is None:
        if failed < total:
            return None
        return f"every measured request failed ({total}: {top}); see requests.jsonl"
    if rate <= max_rate:
        return None
    return (
        f"{failed} of {total} measured requests failed ({rate:.1%} > --max-error-rate "
        f"{max_rate:.1%}; {top})"
    )
