"""Whose an open-loop schedule delay was: the target's queueing, or the load generator's own.

A send goes out late when every user (the concurrency cap) is busy with the target, or
when the load generator itself wakes late.  ``reports.capacity.judge.schedule_lateness``
tells them apart from the records (users busy at a late request's intended send time) and
the client's loop lag; only the target's part may make a step saturated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from llmload.capacity.plan import CapacityOptions, CapacitySearch
from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.options import build_options
from llmload.loadtests.run.phaseloop import scheduled_arrivals
from llmload.reports.capacity.judge import (
    Criterion,
    busy_spans,
    explained_by_client,
    judge,
    schedule_lateness,
)
from llmload.reports.capacity.view import (
    behind_text,
    capacity_html,
    capacity_markdown,
    capacity_terminal,
    rows,
)
from llmload.reports.summary.make import build_summary
from llmload.reports.table.loader import Run
from tests.fixtures.reports import make_records

TTFT = [Criterion(0.95, {"ttft": 600.0})]


def arrivals(
    n: int,
    gap_s: float,
    e2e_s: float,
    delay: Callable[[int], float],
    *,
    ttft_s: float = 0.05,
    tpot_s: float = 0.01,
    t0: float = 1000.0,
) -> list[RequestRecord]:
    """``n`` open-loop requests due every ``gap_s`` seconds, each sent ``delay(i)`` late."""
    return [
        RequestRecord(
            f"r{i}",
            "step01",
            "s",
            "stream",
            "/v1/chat/completions",
            t0 + i * gap_s + delay(i),
            "ok",
            ttft_s=ttft_s,
            e2e_s=e2e_s,
            tpot_s=tpot_s,
            output_tokens=6,
            schedule_delay_s=delay(i),
        )
        for i in range(n)
    ]


def every_fifth(late_s: float) -> Callable[[int], float]:
    return lambda i: late_s if i % 5 == 0 else 0.001


def test_late_sends_while_users_were_free_are_the_clients_not_queueing() -> None:
    # 10 req/s, 100 ms each: one or two of 64 users busy; a fifth of the sends 120 ms late
    recs = arrivals(100, 0.1, 0.1, every_fifth(0.12))
    point = judge(
        recs, TTFT, 0.9, duration_s=10, open_loop=True, scheduled=100, cap=64, client_lag_ms=130
    )
    assert point["verdict"] == "pass" and point["saturated"] == []
    assert point["schedule_delay_ms_p95"] == pytest.approx(120.0)
    assert point["target_delay_ms_p95"] == 0.0
    behind = point["client_behind"]
    assert behind["busy_max"] <= 2 and behind["cap"] == 64 and behind["lag_ms"] == 130
    assert behind["text"] == (
        "load generator behind, not the target: sends 120 ms late (p95), due while at most "
        f"{behind['busy_max']} of the 64 users were busy; its event loop lagged 130 ms (p99)"
    )
    # an older run has no cap to count against: every delay is queueing, as it was
    old = judge(recs, TTFT, 0.9, duration_s=10, open_loop=True, scheduled=100)
    assert old["saturated"] == ["queueing: schedule delay p95 120 ms (every user busy)"]
    assert "client_behind" not in old


def test_late_sends_while_every_user_was_busy_are_the_targets_queue() -> None:
    # 4 users, each request 1 s, one due every 250 ms: all four busy whenever one is due
    recs = arrivals(60, 0.25, 1.0, every_fifth(0.2))
    kw: dict[str, Any] = {"duration_s": 15.0, "open_loop": True, "scheduled": 60}
    point = judge(recs, TTFT, 0.9, cap=4, **kw)
    assert point["saturated"] == [
        "queueing: schedule delay p95 200 ms (every user busy: up to 4 of 4)"
    ]
    assert "client_behind" not in point
    # a lag of 80 ms could account for part of each wait: the rest is still the target's
    lagged = judge(recs, TTFT, 0.9, cap=4, client_lag_ms=80, **kw)
    assert lagged["target_delay_ms_p95"] == pytest.approx(120.0)
    assert lagged["saturated"][0].endswith("120 ms beyond the load generator's own lag)")
    # ... one of 250 ms could account for all of it: not the target's queueing
    covered = judge(recs, TTFT, 0.9, cap=4, client_lag_ms=250, **kw)
    assert covered["saturated"] == []
    assert "every user busy for some of them" in covered["client_behind"]["text"]
    # and the same sends against 64 users: far from all busy
    free = judge(recs, TTFT, 0.9, cap=64, **kw)
    assert free["saturated"] == [] and free["client_behind"]["busy_max"] == 4


def test_only_the_targets_part_of_each_delay_counts_as_its_latency() -> None:
    recs = arrivals(100, 0.1, 0.1, every_fifth(0.12))
    late = schedule_lateness(recs, 64, 0.0)
    assert late is not None
    # the client's own delay taken out: TTFT from the actual send
    assert [r.schedule_delay_s for r in late.target_records[:2]] == [0.0, 0.0]
    busy = schedule_lateness(arrivals(60, 0.25, 1.0, every_fifth(0.2)), 4, 50.0)
    assert busy is not None and busy.target_records[5].schedule_delay_s == pytest.approx(0.15)
    assert schedule_lateness(make_records("s", "stream", 10, t_start=0.0), 64) is None


def test_a_failure_within_the_clients_own_delay_is_not_evidence() -> None:
    slo = [Criterion(0.95, {"ttft": 100.0})]
    kw: dict[str, Any] = {"duration_s": 10.0, "open_loop": True, "scheduled": 100, "cap": 64}
    # 50 ms from the send, but a fifth sent 120 ms late: p95 from the intended time 170 ms
    recs = arrivals(100, 0.1, 0.1, every_fifth(0.12))
    point = judge(recs, slo, 0.9, **kw)
    assert point["verdict"] == "fail" and point["client_behind"]["verdict_on_time"] == "pass"
    assert explained_by_client(point, {})
    # 400 ms from the send: it fails with or without the client's delay, by more than it
    slow = judge(arrivals(100, 0.1, 0.5, every_fifth(0.12), ttft_s=0.4), slo, 0.9, **kw)
    assert slow["verdict"] == "fail" and slow["client_behind"]["verdict_on_time"] == "fail"
    assert not explained_by_client(slow, {})
    # TPOT (no schedule delay in it) 2 ms beyond its bound, the client 120 ms behind: the
    # sends it let slip went out together, a burst the schedule did not hold — no evidence
    tpot = [Criterion(0.95, {"tpot": 10.0})]
    near = judge(arrivals(100, 0.1, 0.1, every_fifth(0.12), tpot_s=0.012), tpot, 0.9, **kw)
    assert near["verdict"] == "fail" and near["client_behind"]["verdict_on_time"] == "fail"
    assert near["beyond_slo_ms"] == pytest.approx(2.0)
    assert near["client_behind"]["bunched"] == pytest.approx(1.2)  # 10 req/s x 120 ms
    assert explained_by_client(near, {})
    # ... but at 5 req/s not one arrival was due within 120 ms: no burst, the failure stands
    sparse = judge(arrivals(50, 0.2, 0.1, every_fifth(0.12), tpot_s=0.012), tpot, 0.9, **kw)
    assert sparse["client_behind"]["bunched"] < 1 and not explained_by_client(sparse, {})
    # a pass is a pass
    assert not explained_by_client(judge(recs, TTFT, 0.9, **kw), {})


def test_an_agent_session_keeps_its_user_busy_from_first_request_to_last() -> None:
    recs = [
        replace(r, session_id=f"s{i // 3}", step=i % 3, started_at=1000.0 + i)
        for i, r in enumerate(arrivals(6, 1.0, 0.5, lambda i: 0.0))
    ]
    assert sorted(busy_spans(recs)) == [(1000.0, 1002.5), (1003.0, 1005.5)]


def test_the_report_says_the_load_generator_fell_behind() -> None:
    recs = arrivals(100, 0.1, 0.1, every_fifth(0.12))
    point = judge(recs, TTFT, 0.9, duration_s=10, open_loop=True, cap=64, client_lag_ms=130)
    cap = {
        "unit": "req/s",
        "answer": {"lo": 10.0, "hi": None},
        "curve": [{**point, "load": 10.0, "phase": "step01", "search_verdict": "pass"}],
    }
    (row,) = rows(cap)
    assert "load generator behind, not the target: sends 120 ms late (p95)" in row[-1]
    assert row[-1].endswith("a pass still counts (the client only adds delay)")
    assert behind_text(cap) == (
        "the load generator itself fell behind its schedule at 10 req/s: sends up to 120 ms "
        "late (p95) with its event loop lagging up to 130 ms (p99), not counted as the "
        "target's queueing"
    )


def _late_open_loop_drive(
    copts: CapacityOptions, ttft_ms_at: Callable[[float], float], late_s: float = 0.12
) -> CapacitySearch:
    """Drive an open-loop plan whose every step had a fifth of its sends ``late_s`` late while
    only a few users were busy (the load generator's own delay)."""
    plan = CapacitySearch(copts, build_options({}, {"target": "http://127.0.0.1:9"}))
    for i, phase in enumerate(plan):
        assert i < 30, "the plan never ended"
        assert phase.rate is not None
        n = scheduled_arrivals(plan.opts.load, phase, 1)
        plan.on_phase(phase.name, phase.mode, "start", 100.0 * i)
        ttft = ttft_ms_at(phase.rate) / 1000.0
        for r in arrivals(n, 1.0 / phase.rate, ttft + 0.05, every_fifth(late_s), ttft_s=ttft):
            plan.on_record(replace(r, phase=phase.name, request_id=f"{phase.name}-{r.request_id}"))
        plan.on_phase(phase.name, phase.mode, "end", 100.0 * i + 10.0)
    return plan


OPEN = CapacityOptions(
    criteria=(Criterion(0.5, {"ttft": 300.0}),),
    open_loop=True,
    start=1.0,
    minimum=1.0,
    maximum=None,
    tolerance=0.1,
    budget_s=3600,
    confidence=0.9,
    step_requests=40,
    min_step_s=1.0,
    warmup_s=0.0,
)


def test_a_search_goes_on_past_sends_the_client_let_slip() -> None:
    # the target keeps TTFT at 100 ms up to 7 req/s, 400 ms above; every step's sends slip
    plan = _late_open_loop_drive(OPEN, lambda rate: 100.0 if rate <= 7 else 400.0, 0.06)
    assert plan.result is not None and plan.result["reason"] == "converged", plan.log
    assert plan.result["lo"] <= 7 < plan.result["hi"] <= 7 / 0.9
    assert {e["search_verdict"] for e in plan.log} == {"pass", "fail"}
    assert all(not e["point"]["saturated"] for e in plan.log)
    assert all(e["client_behind"].startswith("load generator behind") for e in plan.log)
    assert plan.info()["capacity"]["concurrency_cap"] == OPEN.concurrency_cap


def test_a_failure_the_clients_delay_explains_is_run_again_then_a_harness_ceiling() -> None:
    # 50 ms from the send, p95 within 100 ms: only the client's 120 ms slips fail it
    copts = replace(OPEN, criteria=(Criterion(0.95, {"ttft": 100.0}),), start=4.0)
    plan = _late_open_loop_drive(copts, lambda rate: 50.0)
    assert [e["search_verdict"] for e in plan.log][:2] == ["unreliable", "unreliable"]
    assert plan.log[1]["why"].startswith("again: the load generator")
    assert plan.result is not None and plan.result["reason"] == "harness"
    assert "fail" not in {e["search_verdict"] for e in plan.log}


def _late_capacity_run(cap: int | None) -> Run:
    recs = [replace(r, phase="step01-10rps") for r in arrivals(100, 0.1, 0.1, every_fifth(0.12))]
    step = {
        "phase": "step01-10rps",
        "load": 10.0,
        "why": "first step",
        "search_verdict": "pass",
        "starved": [],
        "duration_s": 10.0,
        "scheduled": 100,
        "client_lag_ms": 130.0,
    }
    block: dict[str, Any] = {
        "search": "open loop (requests/s)",
        "unit": "req/s",
        "open_loop": True,
        "criteria": [{"quantile": 0.95, "bounds_ms": {"ttft": 600.0}}],
        "slo": "ttft_p95=600ms",
        "confidence": 0.9,
        "tolerance": 0.1,
        "budget_s": 60,
        "elapsed_s": 12.0,
        "steps": [step],
        "status": "done",
        "answer": {"lo": 10.0, "hi": None, "estimate": 10.0, "reason": "maximum"},
    }
    if cap is not None:
        block["concurrency_cap"] = cap
    phases = [{"name": "step01-10rps", "mode": "stream", "started_at": 1000.0, "ended_at": 1010.0}]
    return Run(
        path=Path("cap"), meta={"run_id": "cap", "phases": phases, "capacity": block}, records=recs
    )


def test_the_summary_rejudges_whose_delay_it_was_from_run_json() -> None:
    summary = build_summary(_late_capacity_run(64), "ttft=600ms")
    assert summary.capacity is not None
    (point,) = summary.capacity["curve"]
    assert point["saturated"] == [] and point["client_behind"]["lag_ms"] == 130.0
    note = "the load generator itself fell behind its schedule at 10 req/s"
    assert f"Note: {note}" in capacity_markdown(summary)
    assert note in capacity_html(summary)
    assert capacity_terminal(summary)[1].startswith(f"capacity: {note}")
    # a run from before the cap was recorded reads as it did: every delay queueing
    old = build_summary(_late_capacity_run(None), "ttft=600ms").capacity
    assert old is not None and old["curve"][0]["saturated"][0].startswith("queueing")
