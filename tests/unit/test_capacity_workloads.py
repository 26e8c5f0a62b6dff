"""Capacity search over a trace replay's pace and over agent sessions, without sockets: the
replay's laps, the plan's steps and their judging, and what the report shows of them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from llmload.capacity.plan import CapacityOptions, CapacitySearch
from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.options import build_options
from llmload.loadtests.run.context import REPLAY_LEAD_S
from llmload.loadtests.run.phaseloop import scheduled_arrivals
from llmload.loadtests.run.phases import Phase
from llmload.loadtests.workload.replay import Pace
from llmload.reports.capacity.curve import answer_text, load_text
from llmload.reports.capacity.judge import Criterion, judge
from llmload.reports.capacity.view import SESSION_HEADER, capacity_markdown
from llmload.reports.summary.make import build_summary
from llmload.reports.table.loader import Run
from tests.fixtures.reports import make_records

TARGET = {"target": "http://127.0.0.1:9"}
#: four requests half a second apart: a lap of 2 s, 2 req/s at speedup 1
PACE = Pace((0.0, 0.5, 1.0, 1.5))


def replay_options(**kw) -> CapacityOptions:
    base = CapacityOptions(
        criteria=(Criterion(0.5, {"ttft": 300.0}),),
        open_loop=True,
        start=1.0,
        minimum=0.25,
        maximum=None,
        tolerance=0.1,
        budget_s=3600,
        confidence=0.9,
        step_requests=20,
        min_step_s=1.0,
        warmup_s=2.0,
        replay=PACE,
        trace={"file": "t.jsonl", "window": None, "requests": 4, "lap_s": 2.0, "rate_per_s": 2.0},
    )
    return replace(base, **kw)


def feed(plan: CapacitySearch, phase: Phase, i: int, recs: list[RequestRecord]) -> None:
    plan.on_phase(phase.name, phase.mode, "start", 100.0 * i)
    for r in recs:
        plan.on_record(r)
    plan.on_phase(phase.name, phase.mode, "end", 100.0 * i + phase.duration)


def test_a_replay_search_steps_through_speedups_on_laps_of_their_own() -> None:
    plan = CapacitySearch(replay_options(), build_options({}, TARGET))
    phases = []
    for i, phase in enumerate(plan):
        assert i < 30, "the plan never ended"
        phases.append(phase)
        assert phase.timed and phase.rate is None and phase.speedup is not None
        replay_s = phase.duration - REPLAY_LEAD_S
        n = PACE.count_before(replay_s, phase.speedup)
        # TTFT grows with the pace: 60 ms per 1x, so 5x is the limit of p50 <= 300 ms
        recs = make_records(
            phase.name,
            phase.mode,
            n,
            t_start=100.0 * i,
            ttft_ms=60.0 * phase.speedup,
            jitter=0.01,
            open_loop=True,
        )
        feed(plan, phase, i, recs)
    warm, first = phases[0], phases[1]
    assert warm.warmup and warm.duration == REPLAY_LEAD_S + 2.0 and warm.lap == 0
    # the warm-up replayed 2 s at 1x: one lap; the first step starts on the next
    assert first.lap == 1 and first.name == "step01-1x"
    # a step holds its requests: 20 at 1x are five laps of 2 s, the last ending at 9.5 s
    assert first.duration == REPLAY_LEAD_S + 9.75  # between the 20th arrival and the 21st
    laps = [p.lap for p in phases]
    assert laps == sorted(laps) and len(set(laps)) == len(laps)
    assert plan.result is not None
    lo, hi = plan.result["lo"], plan.result["hi"]
    assert lo is not None and hi is not None and lo <= 5.0 <= hi and hi - lo <= 0.1 * hi
    info = plan.info()["capacity"]
    assert info["unit"] == "speedup" and info["open_loop"] is True
    assert info["search"] == "open loop (a trace replay's speedup)"
    assert info["trace"]["rate_per_s"] == 2.0
    step = info["steps"][0]
    assert step["scheduled"] == 20 and step["duration_s"] == 9.75
    est = plan.result["estimate"]
    assert plan.result["text"].startswith(
        f"sustains the trace at {est:.3g}× its pace (≈ {2 * est:.3g} req/s; "
        f"between {lo:.3g}× and {hi:.3g}×) at p50 TTFT ≤ 300 ms"
    )


def session_records(phase: Phase, sessions: int, steps: int, ttft_ms: float, t0: float) -> list:
    """``sessions`` complete sessions of ``steps`` requests each, one after another."""
    out = []
    base = make_records(phase.name, phase.mode, sessions * steps, t_start=t0, ttft_ms=ttft_ms)
    for k, r in enumerate(base):
        s, step = divmod(k, steps)
        last = step == steps - 1
        out.append(
            replace(
                r,
                session_id=f"{phase.name}-{s}",
                step=step,
                started_at=t0 + s * 1.0 + step * 0.2,
                e2e_s=0.15,
                finish_reason="stop" if last else "tool_calls",
                status="ok",
            )
        )
    return out


def test_an_agent_search_is_sessions_per_second_judged_on_their_requests(capsys) -> None:
    copts = replace(
        replay_options(), replay=None, trace=None, session_steps=4, start=2.0, warmup_s=0.0
    )
    opts = build_options({"arrival": "constant"}, TARGET)
    plan = CapacitySearch(copts, opts)
    assert copts.unit == "sessions/s" and copts.search == "open loop (agent sessions/s)"
    # before any step, a session is taken to give (4 + 1) / 2 requests
    assert plan.per_arrival() == 2.5
    phase = plan.phase(1, 2.0)
    assert phase.name == "step01-2sps" and phase.rate == 2.0 and phase.duration == 4.0
    sessions = scheduled_arrivals(opts.load, phase, 1)
    assert sessions == 8
    plan._pending = (phase, 2.0, "first step")  # as the plan's own loop sets it
    feed(plan, phase, 0, session_records(phase, sessions, 4, 100.0, 0.0))
    point = plan.log[-1]["point"]
    # the schedule is kept in sessions (their first steps), the SLO judged on all requests
    assert point["requests"] == 4 * sessions and point["arrivals"] == sessions
    assert not point["saturated"] and point["verdict"] == "pass"
    assert point["sessions"]["complete"] == sessions
    assert point["sessions"]["session_ms"]["p50"] == pytest.approx(750.0)
    # the next step's length comes from the requests a session gave (20 at 4 x 4 a second
    # is 1.25 s), and is at least four sessions' time to their final answers (750 ms)
    assert plan.per_arrival() == 4.0 and plan.session_floor_s() == pytest.approx(3.0)
    assert plan.phase(2, 4.0).duration == pytest.approx(3.0)
    assert plan.cost_s(4.0) == pytest.approx(3.0)
    line = capsys.readouterr().err
    assert "2 sessions/s (" in line and "req/s sent)" in line
    assert f"sessions: {sessions} of {sessions} complete, p50 750 ms" in line


def test_a_session_step_that_kept_few_of_its_scheduled_sessions_saturated() -> None:
    phase = Phase("step01-4sps", "stream", 5.0, users=64, rate=4.0)
    recs = session_records(phase, 10, 4, 100.0, 0.0)
    crit = (Criterion(0.5, {"ttft": 300.0}),)
    kept = judge(recs, crit, 0.9, duration_s=5.0, open_loop=True, scheduled=10)
    assert kept["arrivals"] == 10 and not kept["saturated"]
    few = judge(recs, crit, 0.9, duration_s=5.0, open_loop=True, scheduled=20)
    assert few["saturated"] == ["schedule: 10 of 20 scheduled sessions started"]


def capacity_meta(unit: str, steps: list[dict], extra: dict | None = None) -> dict:
    phases = [
        {"name": s["phase"], "mode": "stream", "started_at": 1000.0 + 100 * i, "ended_at": 1010.0}
        for i, s in enumerate(steps)
    ]
    return {
        "run_id": "cap",
        "phases": phases,
        "capacity": {
            "search": "test",
            "unit": unit,
            "open_loop": True,
            "criteria": [{"quantile": 0.5, "bounds_ms": {"ttft": 300.0}}],
            "slo": "ttft_p50=300ms",
            "confidence": 0.9,
            "tolerance": 0.1,
            "budget_s": 600,
            "elapsed_s": 30.0,
            "steps": steps,
            "status": "done",
            "answer": {"lo": 2.0, "hi": 4.0, "estimate": 3.0, "reason": "converged"},
            **(extra or {}),
        },
    }


def step(phase: str, load: float, verdict: str) -> dict:
    return {
        "phase": phase,
        "load": load,
        "why": "test",
        "search_verdict": verdict,
        "starved": [],
        "duration_s": 10.0,
        "scheduled": None,
    }


def test_the_report_shows_a_trace_search_in_speedups_and_the_rate_they_sent() -> None:
    steps = [step("step01-2x", 2.0, "pass"), step("step02-4x", 4.0, "fail")]
    records = make_records("step01-2x", "stream", 40, t_start=1000.0, ttft_ms=100.0)
    records += make_records("step02-4x", "stream", 80, t_start=1100.0, ttft_ms=900.0)
    meta = capacity_meta("speedup", steps, {"trace": {"rate_per_s": 2.5}})
    summary = build_summary(Run(path=Path("cap"), meta=meta, records=records), None)
    cap = summary.capacity
    assert cap is not None and cap["open_loop"] and cap["trace"] == {"rate_per_s": 2.5}
    assert cap["text"].startswith(
        "sustains the trace at 3× its pace (≈ 7.5 req/s; between 2× and 4×) at p50 TTFT"
    )
    assert "at 4× p50 TTFT is" in cap["text"]
    md = capacity_markdown(summary)
    assert "| 2× (4 req/s sent) | pass" in md and "| 4× (8 req/s sent) | fail" in md
    assert "replays the trace from its window's start" in md
    assert SESSION_HEADER not in md


def test_the_report_shows_each_steps_time_to_the_sessions_final_answers() -> None:
    steps = [step("step01-2sps", 2.0, "pass"), step("step02-4sps", 4.0, "fail")]
    p1 = Phase("step01-2sps", "stream", 10.0)
    p2 = Phase("step02-4sps", "stream", 10.0)
    records = session_records(p1, 10, 4, 100.0, 1000.0)
    records += session_records(p2, 10, 4, 900.0, 1100.0)
    meta = capacity_meta("sessions/s", steps)
    summary = build_summary(Run(path=Path("cap"), meta=meta, records=records), None)
    cap = summary.capacity
    assert cap is not None
    assert [p["sessions"]["complete"] for p in cap["curve"]] == [10, 10]
    assert cap["text"].startswith("sustains 3 sessions/s (between 2 and 4)")
    md = capacity_markdown(summary)
    assert SESSION_HEADER in md and "750 / 750 (10 of 10 complete)" in md
    assert "agent sessions per second" in md


def test_loads_in_words() -> None:
    assert load_text(8, "users") == "8 users" and load_text(7.5, "req/s") == "7.5 req/s"
    assert load_text(2.0, "sessions/s") == "2 sessions/s" and load_text(3.25, "speedup") == "3.25×"
    block = {
        "unit": "speedup",
        "criteria": [{"quantile": 0.95, "bounds_ms": {"ttft": 600.0}}],
        "trace": {"rate_per_s": 4.0},
        "answer": {"lo": None, "hi": 0.5, "estimate": None, "reason": "below_minimum"},
    }
    assert answer_text(block, []).startswith(
        "does not sustain even the trace at 0.5× its pace (≈ 2 req/s) at p95 TTFT ≤ 600 ms"
    )


def test_closed_loop_agent_users_run_sessions_until_the_step_has_its_requests() -> None:
    copts = replace(
        replay_options(), replay=None, trace=None, open_loop=False, session_steps=3, start=1.0
    )
    assert copts.unit == "users" and copts.search == "closed loop (users running agent sessions)"
    plan = CapacitySearch(copts, build_options({}, TARGET))
    phase = plan.phase(1, 6.0)
    # the step ends once its requests are in, whatever step of a session they were
    assert (phase.users, phase.requests, phase.rate) == (6, 24, None)
