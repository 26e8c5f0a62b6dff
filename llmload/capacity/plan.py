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

A trace (``--dataset trace``, loads in ``speedup``): a step at speedup X replays
the window from its start at X times its pace for as long as it takes to hold its
requests (the window again from its start, in laps, when it is shorter; within
``--min-step``..``--max-step``, plus the replay's lead), each step on laps of its
own (``Phase.lap``: fresh texts).  Agent sessions (``--dataset agent``): open loop the
load is sessions/s, and a step lasts ``requests / (R x requests per session)``, the
requests a session gave in the steps so far (before any, half of ``--agent-steps``
and a half), and at least ``SESSION_WAVES`` times a session's time to its final
answer; closed loop, users running sessions back to back.  Either way the SLOs are
judged on the requests.

Every workload's steps take laps of their own, the warm-up's first, so no step sends
the prompts of one before it (a server's prefix cache would flatter it): open loop each
step's arrivals are seeded with its lap; closed loop the users carry their prompt
sequences on from step to step, as in one long run (``LoadContext.user_prompts``).
"""

from __future__ import annotations

import math
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
from llmload.loadtests.run.context import REPLAY_LEAD_S
from llmload.loadtests.run.healthlog import HealthLog
from llmload.loadtests.run.phaseloop import scheduled_arrivals
from llmload.loadtests.run.phases import Phase
from llmload.loadtests.run.scrape import ServerScraper
from llmload.loadtests.run.sinks import HarnessHealth, NullSink
from llmload.loadtests.workload.replay import Pace
from llmload.reports.capacity.curve import (
    SPEEDUP,
    answer_text,
    client_note,
    load_text,
    plateau,
    session_point,
)
from llmload.reports.capacity.judge import (
    Criterion,
    explained_by_client,
    judge,
    samples_needed,
)
from llmload.reports.draw.fmt import fmt_ms
from llmload.reports.server.saturation import server_saturation
from llmload.reports.table.steady import steady_part
from llmload.reports.table.trust import harness_delay_ms

#: open loop: concurrency cap; reaching it (the schedule slips) is a sign of saturation
OPEN_LOOP_CAP = 64
#: closed loop: a step has at least this many requests per user
CLOSED_LOOP_WAVES = 4
#: open loop, agent sessions: a step lasts at least this many times a session's time to its
#: final answer, so the ramp of its first sessions and the cut of its last ones are a small
#: part of it
SESSION_WAVES = 4


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
    #: a trace replay (``--dataset trace``): its window's pace; the loads are its speedups
    replay: Pace | None = None
    #: what run.json says of the trace (file, window, requests, lap, rate at 1x)
    trace: dict[str, Any] | None = None
    #: agent sessions (``--dataset agent``): model calls per session; 0: single requests
    session_steps: int = 0

    @property
    def unit(self) -> str:
        if self.replay is not None:
            return SPEEDUP
        if self.open_loop:
            return "sessions/s" if self.session_steps else "req/s"
        return "users"

    @property
    def search(self) -> str:
        """The search in words (run.json)."""
        if self.replay is not None:
            return "open loop (a trace replay's speedup)"
        if self.session_steps:
            if self.open_loop:
                return "open loop (agent sessions/s)"
            return "closed loop (users running agent sessions)"
        return "open loop (requests/s)" if self.open_loop else "closed loop (users)"

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

    def step_s(
        self, load: float, probe: bool = False, per_arrival: float = 1.0, floor_s: float = 0.0
    ) -> float:
        """Open loop: how long a step at ``load`` sends for (within --min-step..--max-step).

        Requests/s: ``requests / load``; sessions/s: ``requests / (load x per_arrival)``,
        ``per_arrival`` the requests a session gives, and at least ``floor_s``; a trace at
        speedup ``load``: half way from its last request's time to the next's (so the
        step holds just its requests)."""
        n = self.requests_at(load, probe)
        if self.replay is not None:
            want = (self.replay.at(n - 1, load) + self.replay.at(n, load)) / 2
        else:
            want = max(floor_s, n / (load * per_arrival))
        return min(self.max_step_s, max(self.min_step_s, want))


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
        #: the next phase's lap (``Phase.lap``): each step draws prompts of its own (a trace
        #: replay: its first lap; a step replays laps of its own)
        self._next_lap = 0

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

    def per_arrival(self) -> float:
        """Requests per arrival: 1, or for agent sessions the fewest a session gave in a step
        so far (sessions cut by a step's end give fewer than ``--agent-steps``)."""
        k = self.copts.session_steps
        if not k:
            return 1.0
        seen = [
            e["point"]["requests"] / e["scheduled"]
            for e in self.log
            if e.get("scheduled") and e.get("point")
        ]
        return max(1.0, min(float(k), *seen)) if seen else (k + 1) / 2

    def session_floor_s(self) -> float:
        """Open-loop agent sessions: the shortest step, ``SESSION_WAVES`` times a session's
        time to its final answer (p50) — the longest of the passing steps so far (steps
        within the SLO are where the search narrows), else the shortest seen; 0 before any."""
        seen = [
            (e["search_verdict"] == PASS, p50 / 1000.0)
            for e in self.log
            if (sessions := (e.get("point") or {}).get("sessions"))
            and (p50 := sessions["session_ms"].get("p50")) is not None
        ]
        if not seen:
            return 0.0
        passed = [t for ok, t in seen if ok]
        return SESSION_WAVES * (max(passed) if passed else min(t for _, t in seen))

    def phase(self, index: int, load: float) -> Phase:
        """The phase of step ``index`` at ``load`` (a trace replay's: the laps it takes are
        its own, the next step's start after them)."""
        c = self.copts
        n = c.requests_at(load, self.probing())
        mode: Any = c.mode
        if c.replay is not None:
            replay_s = c.step_s(load, self.probing())
            return self._replay_phase(f"step{index:02d}-{load:g}x", replay_s, load)
        if c.open_loop:
            duration = c.step_s(load, self.probing(), self.per_arrival(), self.session_floor_s())
            unit = "sps" if c.session_steps else "rps"
            name = f"step{index:02d}-{load:g}{unit}"
            return Phase(name, mode, duration, users=c.concurrency_cap, rate=load, lap=self._lap())
        name = f"step{index:02d}-{load:g}users"
        return Phase(name, mode, c.max_step_s, requests=n, users=int(load), lap=self._lap())

    def _lap(self) -> int:
        """The next phase's lap, taken: its prompts are none an earlier phase sent (open loop:
        arrivals seeded with it; closed loop: the users' sequences carried on)."""
        lap = self._next_lap
        self._next_lap += 1
        return lap

    def _replay_phase(self, name: str, replay_s: float, load: float, warmup: bool = False) -> Phase:
        """A phase replaying the trace at speedup ``load`` for ``replay_s`` seconds."""
        c = self.copts
        assert c.replay is not None
        lap = self._next_lap
        laps = math.ceil(c.replay.count_before(replay_s, load) / len(c.replay.offsets))
        self._next_lap += max(1, laps)
        return Phase(
            name,
            c.mode,  # type: ignore[arg-type]  # the candidate's mode is a checked str, the record's a Literal
            REPLAY_LEAD_S + replay_s,
            warmup,
            users=c.concurrency_cap,
            timed=True,
            speedup=load,
            lap=lap,
        )

    def cost_s(self, load: float) -> float:
        """How long a step at ``load`` should take (closed loop: from the measured throughput;
        a trace replay's: its lead and the replay)."""
        c = self.copts
        n = c.requests_at(load, self.probing())
        if c.open_loop:
            lead = REPLAY_LEAD_S if c.replay is not None else 0.0
            floor = self.session_floor_s()
            return lead + c.step_s(load, self.probing(), self.per_arrival(), floor)
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
            if c.replay is not None:
                yield self._replay_phase("warmup", c.warmup_s, load, warmup=True)
            elif c.open_loop:
                yield Phase(
                    "warmup",
                    c.mode,  # type: ignore[arg-type]  # the candidate's mode is a checked str, the record's a Literal
                    c.warmup_s,
                    True,
                    users=c.concurrency_cap,
                    rate=load,
                    lap=self._lap(),
                )
            else:
                yield Phase(
                    "warmup",
                    c.mode,  # type: ignore[arg-type]  # the candidate's mode is a checked str, the record's a Literal
                    c.warmup_s,
                    True,
                    users=int(load),
                    lap=self._lap(),
                )
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
        duration = phase.duration if c.open_loop else wall
        scheduled = None
        if c.replay is not None:  # the replay's own length: its lead sends nothing
            duration = phase.duration - REPLAY_LEAD_S
            scheduled = c.replay.count_before(duration, load)
        elif c.open_loop:
            scheduled = scheduled_arrivals(self.opts.load, phase, 1)
        health = self._health_by_phase.get(phase.name) or {}
        lag_ms = harness_delay_ms(health)  # the most the client itself may have added
        point = judge(
            records,
            c.criteria,
            c.confidence,
            duration_s=duration,
            open_loop=c.open_loop,
            scheduled=scheduled,
            cap=phase.users if c.open_loop else None,
            client_lag_ms=lag_ms,
        )
        sessions = session_point(records) if c.session_steps else None
        if sessions is not None:
            point["sessions"] = sessions
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
        starved = list(health.get("starved") or [])
        if not c.open_loop:
            earlier = [(e["load"], e["point"]) for e in self.log if e.get("point")]
            flat = plateau(point, load, earlier)
            if flat:
                point["plateau"] = flat
        # a starved or late client only adds delay: a pass still counts, and so does a failure
        # by more than the client's own delay; a closer one is not evidence about the server
        doubt = explained_by_client(point, health)
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
                "client_lag_ms": lag_ms,
                "client_behind": (point.get("client_behind") or {}).get("text", ""),
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
        behind = point.get("client_behind")
        if behind:  # what the step counts for: said once, by the starved note when starved
            extra += f" [{behind['text']}{'' if starved else client_note(verdict)}]"
        if starved:
            counted = {
                UNRELIABLE: "",
                PASS: "; a pass still counts: it only adds delay",
            }.get(verdict, "; the failure stands beyond its lag")
            extra += f" [load generator starved: {', '.join(starved)}{counted}]"
        unit = self.copts.unit
        what = load_text(load, unit)
        if unit in (SPEEDUP, "sessions/s"):
            what += f" ({point['sent_per_s']:.3g} req/s sent)"
        sessions = point.get("sessions")
        if sessions:
            took = sessions["session_ms"].get("p50")
            extra += (
                f" [sessions: {sessions['complete']} of {sessions['sessions']} complete"
                + ("" if took is None else f", p50 {fmt_ms(took)} ms to the final answer")
                + "]"
            )
        served = f", {point['inputs_per_s']:.3g} inputs/s" if "inputs_per_s" in point else ""
        return (
            f"capacity {name}: {what} -> {verdict} "
            f"({point['verdict']}; {crit}; {point['requests']} requests{served}){extra}"
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
                "search": ("fixed sweep, " if c.sweep else "") + c.search,
                "unit": c.unit,
                "open_loop": c.open_loop,
                "trace": c.trace,
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
                "concurrency_cap": c.concurrency_cap if c.open_loop else None,
                "warmup": "auto" if c.warmup_auto else c.warmup_s,
                "elapsed_s": time.monotonic() - self._started if self._started else 0.0,
                "steps": [{k: v for k, v in e.items() if k != "point"} for e in self.log],
                "answer": self.result,
                "status": "done" if self.result is not None else "searching",
            }
        }


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
