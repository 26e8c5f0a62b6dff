"""The capacity search as a run's phase plan: which phase each step is, and how it is judged.

``CapacitySearch`` is both the run's ``PhasePlan`` (``loadtests.run.runner.run(phases=...)``)
and a sink of that run: it collects each step's records and harness health,
judges the step when its phase ends (``reports.capacity.judge.judge``), and asks the
pure search (``loadtests.run.capacity.decide``) for the next load.  A step is an
ordinary phase with a load of its own (``Phase.users`` / ``Phase.rate``).

Open loop: a step at R req/s lasts ``requests / R`` seconds (within
``--min-step``..``--max-step``) with at most ``--concurrency-cap`` requests in
flight.  Closed loop: a step at U back-to-back users lasts until it has its
requests (at least ``CLOSED_LOOP_WAVES`` per user).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.options import RunOptions
from llmload.loadtests.run.capacity import (
    FAIL,
    PASS,
    UNRELIABLE,
    Done,
    SearchConfig,
    Step,
    answer,
    bracket,
    decide,
)
from llmload.loadtests.run.healthlog import HealthLog
from llmload.loadtests.run.phaseloop import scheduled_arrivals
from llmload.loadtests.run.phases import Phase
from llmload.loadtests.run.scrape import ServerScraper
from llmload.loadtests.run.sinks import HarnessHealth, NullSink
from llmload.reports.capacity.curve import answer_text, plateau
from llmload.reports.capacity.judge import (
    Criterion,
    explained_by_client,
    judge,
    samples_needed,
)
from llmload.reports.fmt import fmt_ms
from llmload.reports.server.saturation import server_saturation
from llmload.reports.steady import steady_part

#: open loop: concurrency cap; reaching it (the schedule slips) is a sign of saturation
OPEN_LOOP_CAP = 64
#: closed loop: a step has at least this many requests per user
CLOSED_LOOP_WAVES = 4


@dataclass(frozen=True)
class CapacityOptions:
    """What to search and how long."""

    criteria: tuple[Criterion, ...]
    open_loop: bool
    start: float
    minimum: float
    maximum: float | None
    tolerance: float
    budget_s: float
    confidence: float
    mode: str = "stream"
    step_requests: int = 0
    min_step_s: float = 5.0
    max_step_s: float = 120.0
    warmup_s: float = 10.0
    #: ``--warmup auto``: no warm-up step; each step judged on its steady part (MSER-5)
    warmup_auto: bool = False
    concurrency_cap: int = OPEN_LOOP_CAP
    #: no --target: the bundled server's engine ("" = the best available) and arguments
    engine: str = ""
    server_args: tuple[str, ...] = ()
    #: instead of searching, step through this many loads evenly from minimum to maximum
    sweep: int = 0

    @property
    def unit(self) -> str:
        return "req/s" if self.open_loop else "users"

    def requests_per_step(self, probe: bool = False) -> int:
        """``--step-requests``, else twice the fewest that can show the strictest percentile;
        a probe (no load has failed yet) gets just the fewest."""
        if self.step_requests:
            return self.step_requests
        q = max(c.quantile for c in self.criteria)
        return (1 if probe else 2) * samples_needed(q, self.confidence)

    def requests_at(self, load: float, probe: bool = False) -> int:
        """Requests in a step at ``load``; closed loop at least ``CLOSED_LOOP_WAVES`` per user,
        so the synchronised first wave and the draining last one are a small part of it."""
        n = self.requests_per_step(probe)
        return n if self.open_loop else max(n, CLOSED_LOOP_WAVES * int(load))


class CapacitySearch(NullSink):
    """The search as a run's phase plan, and a sink collecting each step's records and health."""

    def __init__(self, copts: CapacityOptions, opts: RunOptions) -> None:
        self.copts = copts
        self.opts = opts
        self.cfg = SearchConfig(
            start=copts.start,
            minimum=copts.minimum,
            maximum=copts.maximum,
            tolerance=copts.tolerance,
            integer=not copts.open_loop,
        )
        self.steps: list[Step] = []
        self.log: list[dict[str, Any]] = []
        self.result: dict[str, Any] | None = None
        self.stop_reason = ""
        self._records: dict[str, list[RequestRecord]] = {}
        self._times: dict[str, list[float]] = {}
        self._health = HealthLog()
        self._health_by_phase: dict[str, dict[str, Any]] = {}
        #: the scraper of the target's own metrics (``llmload.servermetrics``), when it has one
        self.server: ServerScraper | None = None
        self._started = 0.0
        #: the step under way: judged when its phase ends (its records are all in by then),
        #: so run.json's capacity block, rewritten right after, already holds it
        self._pending: tuple[Phase, float, str] | None = None

    # -- sink -----------------------------------------------------------------
    def on_record(self, record: RequestRecord) -> None:
        self._records.setdefault(record.phase, []).append(record)

    def on_health(self, source: str, snapshot: HarnessHealth) -> None:
        self._health.add(source, snapshot)

    def on_phase(self, name: str, mode: str, event: str, at: float) -> None:
        if event == "start":
            self._times[name] = [at]
            self._health.begin(name)
        elif event == "end":
            self._times.setdefault(name, [at]).append(at)
            block = self._health.end(name)
            if block is not None:
                self._health_by_phase[name] = block
            self._judge_pending(name)

    # -- plan -----------------------------------------------------------------
    def probing(self) -> bool:
        """No load has failed yet: steps only need to show a pass (far below the limit they
        do so with every request within bounds), so they take the fewest requests that can."""
        return not self.copts.sweep and bracket(self.steps)[1] is None

    def phase(self, index: int, load: float) -> Phase:
        """The phase of step ``index`` at ``load``."""
        c = self.copts
        n = c.requests_at(load, self.probing())
        mode: Any = c.mode
        if c.open_loop:
            duration = min(c.max_step_s, max(c.min_step_s, n / load))
            name = f"step{index:02d}-{load:g}rps"
            return Phase(name, mode, duration, users=c.concurrency_cap, rate=load)
        name = f"step{index:02d}-{load:g}users"
        return Phase(name, mode, c.max_step_s, requests=n, users=int(load))

    def cost_s(self, load: float) -> float:
        """How long a step at ``load`` should take (closed loop: from the measured throughput)."""
        c = self.copts
        n = c.requests_at(load, self.probing())
        if c.open_loop:
            return min(c.max_step_s, max(c.min_step_s, n / load))
        per_user = [
            e["point"]["throughput_per_s"] / e["load"]
            for e in self.log
            if e.get("point") and e["point"].get("throughput_per_s")
        ]
        if not per_user:
            return c.min_step_s
        # throughput per user falls as load grows: the lowest seen is the safe guess
        return min(c.max_step_s, max(c.min_step_s, n / (min(per_user) * load)))

    def __iter__(self) -> Iterator[Phase]:
        c = self.copts
        self._started = time.monotonic()
        if c.warmup_s > 0:
            load = c.start
            if c.open_loop:
                yield Phase("warmup", c.mode, c.warmup_s, True, users=c.concurrency_cap, rate=load)  # type: ignore[arg-type]
            else:
                yield Phase("warmup", c.mode, c.warmup_s, True, users=int(load))  # type: ignore[arg-type]
        if c.sweep:
            yield from self._sweep()
            return
        while True:
            left = c.budget_s - (time.monotonic() - self._started)
            decision = decide(self.cfg, self.steps, left, self.cost_s)
            if isinstance(decision, Done):
                self._finish(decision.reason, decision.why)
                return
            phase = self.phase(len(self.steps) + 1, decision.load)
            self._pending = (phase, decision.load, decision.why)
            yield phase
            self._judge_pending(phase.name)

    def sweep_loads(self) -> list[float]:
        """``--sweep N``: N loads evenly spaced from ``--min`` to ``--max`` (whole users)."""
        c = self.copts
        assert c.maximum is not None
        n = c.sweep
        xs = [c.minimum + (c.maximum - c.minimum) * i / max(1, n - 1) for i in range(n)]
        if not c.open_loop:
            return sorted({float(max(1, round(x))) for x in xs})
        return [float(f"{x:.3g}") for x in xs]

    def _sweep(self) -> Iterator[Phase]:
        """A fixed sweep (guidellm's way), for comparison: every load, whatever the answer."""
        for i, load in enumerate(self.sweep_loads(), start=1):
            phase = self.phase(i, load)
            self._pending = (phase, load, "fixed sweep")
            yield phase
            self._judge_pending(phase.name)
        self._finish("sweep", f"fixed sweep of {len(self.steps)} loads")

    def _judge_pending(self, name: str) -> None:
        if self._pending is not None and self._pending[0].name == name:
            pending, self._pending = self._pending, None
            self._judge(*pending)

    def _judge(self, phase: Phase, load: float, why: str) -> None:
        c = self.copts
        records = self._records.get(phase.name, [])
        dropped = 0
        if c.warmup_auto:  # the step's own transient (the load just changed) is left out
            records, dropped = steady_part(records)
        times = self._times.get(phase.name, [])
        wall = times[-1] - times[0] if len(times) == 2 else phase.duration
        scheduled = scheduled_arrivals(self.opts.load, phase, 1) if c.open_loop else None
        point = judge(
            records,
            c.criteria,
            c.confidence,
            duration_s=phase.duration if c.open_loop else wall,
            open_loop=c.open_loop,
            scheduled=scheduled,
        )
        earlier_here = [
            e for e in self.log if e["load"] == load and e["search_verdict"] != UNRELIABLE
        ]
        if earlier_here:
            # a step too close to call, run again: the verdict is on both runs' requests
            pool = [r for e in earlier_here for r in self._records.get(e["phase"], [])]
            pooled = judge(
                pool + records,
                c.criteria,
                c.confidence,
                duration_s=point["duration_s"] + sum(e["duration_s"] for e in earlier_here),
                open_loop=c.open_loop,
            )
            for key in ("criteria", "verdict", "ratio"):
                point[key] = pooled[key]
            point["pooled_with"] = [e["phase"] for e in earlier_here]
        if self.server is not None and len(times) == 2 and records:
            last = max(r.started_at for r in records)
            point["saturated"] += server_saturation(
                self.server.samples, times[0], last, times[1], growing=c.open_loop
            )
        if c.warmup_auto:
            point["transient_dropped"] = dropped
        health = self._health_by_phase.get(phase.name) or {}
        starved = list(health.get("starved") or [])
        if not c.open_loop:
            earlier = [(e["load"], e["point"]) for e in self.log if e.get("point")]
            flat = plateau(point, load, earlier)
            if flat:
                point["plateau"] = flat
        # a starved client only adds delay: a pass still counts, and so does a failure by
        # more than the client's worst lag; a closer failure is not evidence about the server
        doubt = bool(starved) and explained_by_client(point, health)
        verdict = PASS if point["verdict"] == "pass" else UNRELIABLE if doubt else FAIL
        uncertain = point["verdict"] == "uncertain"
        self.steps.append(Step(load, verdict, point["ratio"], bool(point["saturated"]), uncertain))
        self.log.append(
            {
                "phase": phase.name,
                "load": load,
                "why": why,
                "search_verdict": verdict,
                "starved": starved,
                "wall_s": wall,
                "duration_s": point["duration_s"],
                "scheduled": scheduled,
                "plateau": point.get("plateau", ""),
                "pooled_with": point.get("pooled_with", []),
                "point": point,
            }
        )
        _say(self._step_line(phase.name, load, verdict, point, starved))

    def _step_line(
        self, name: str, load: float, verdict: str, point: dict[str, Any], starved: list[str]
    ) -> str:
        crit = "; ".join(
            f"{x['slo']}: {fmt_ms(x['observed_ms'])} ms"
            if x["observed_ms"] is not None
            else f"{x['slo']}: {x['within']}/{x['n']} within"
            for x in point["criteria"]
        )
        extra = "".join(f" [{s}]" for s in point["saturated"])
        if starved:
            counted = "" if verdict == UNRELIABLE else "; the verdict stands beyond its lag"
            extra += f" [load generator starved: {', '.join(starved)}{counted}]"
        return (
            f"capacity {name}: {load:g} {self.copts.unit} -> {verdict} "
            f"({point['verdict']}; {crit}; {point['requests']} requests){extra}"
        )

    def _finish(self, reason: str, why: str) -> None:
        self.stop_reason = why
        a = answer(self.cfg, self.steps, reason)
        self.result = {**asdict(a), "why": why}
        block = self.info()["capacity"]
        curve = [{"load": e["load"], **e["point"]} for e in self.log]
        self.result["text"] = answer_text(block, curve)
        _say(f"capacity: {self.result['text']} [{reason}: {why}]")

    def info(self) -> dict[str, Any]:
        """``run.json``'s ``capacity`` block (rewritten after every step)."""
        c = self.copts
        return {
            "capacity": {
                "search": ("fixed sweep, " if c.sweep else "")
                + ("open loop (requests/s)" if c.open_loop else "closed loop (users)"),
                "unit": c.unit,
                "mode": c.mode,
                "criteria": [
                    {"quantile": x.quantile, "bounds_ms": x.bounds_ms} for x in c.criteria
                ],
                "slo": ",".join(x.spec for x in c.criteria),
                "confidence": c.confidence,
                "tolerance": c.tolerance,
                "budget_s": c.budget_s,
                "start": c.start,
                "minimum": c.minimum,
                "maximum": c.maximum,
                "requests_per_step": c.requests_per_step(),
                "warmup": "auto" if c.warmup_auto else c.warmup_s,
                "elapsed_s": time.monotonic() - self._started if self._started else 0.0,
                "steps": [{k: v for k, v in e.items() if k != "point"} for e in self.log],
                "answer": self.result,
                "status": "done" if self.result is not None else "searching",
            }
        }


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
