"""The capacity plan (llmload.capacity.plan) driven as the runner drives it, without sockets."""

from __future__ import annotations

from dataclasses import replace

from llmload.capacity.plan import CapacityOptions, CapacitySearch
from llmload.loadtests.options import build_options
from llmload.reports.capacity.judge import Criterion
from tests.fixtures.reports import make_records


def drive(copts: CapacityOptions, ttft_ms_at, cold: int = 0) -> CapacitySearch:
    """Run the plan's phases with records whose TTFT is ``ttft_ms_at(load)`` (the first
    ``cold`` requests of every step four times that: each step starts cold)."""
    plan = CapacitySearch(copts, build_options({}, {"target": "http://127.0.0.1:9"}))
    for i, phase in enumerate(plan):
        assert i < 30, "the plan never ended"
        load = phase.rate if phase.rate is not None else phase.users
        n = phase.requests or int(phase.duration * (phase.rate or 1))
        plan.on_phase(phase.name, phase.mode, "start", 100.0 * i)
        recs = make_records(
            phase.name, phase.mode, n, t_start=100.0 * i, ttft_ms=ttft_ms_at(load), jitter=0.01
        )
        for k, r in enumerate(recs):
            plan.on_record(replace(r, ttft_s=(r.ttft_s or 0) * 4) if k < cold else r)
        plan.on_phase(phase.name, phase.mode, "end", 100.0 * i + 10.0)
        # judged as its phase ended: run.json's block already holds this step
        if not phase.warmup:
            assert plan.info()["capacity"]["steps"][-1]["phase"] == phase.name
    return plan


#: a closed-loop search from one user, p50 TTFT within 300 ms
CLOSED_LOOP = CapacityOptions(
    criteria=(Criterion(0.5, {"ttft": 300.0}),),
    open_loop=False,
    start=1.0,
    minimum=1.0,
    maximum=None,
    tolerance=0.1,
    budget_s=3600,
    confidence=0.9,
    step_requests=20,
    warmup_s=5.0,
)


def test_closed_loop_plan_finds_the_users_limit() -> None:
    copts = CLOSED_LOOP
    plan = drive(copts, lambda users: 45.0 * users)  # 6 users: 270 ms, 7: 315 ms
    assert plan.result is not None
    assert (plan.result["lo"], plan.result["hi"]) == (6, 7)
    info = plan.info()["capacity"]
    assert info["status"] == "done" and info["unit"] == "users"
    assert plan.result["text"].startswith("sustains 6 users (between 6 and 7) at p50 TTFT")
    # closed loop: at least 4 requests per user in a step
    assert copts.requests_at(7) == 28 and copts.requests_at(2) == 20


def test_open_loop_phases_carry_their_rate_and_the_sweep_covers_its_range() -> None:
    copts = CapacityOptions(
        criteria=(Criterion(0.5, {"ttft": 300.0}),),
        open_loop=True,
        start=1.0,
        minimum=1.0,
        maximum=9.0,
        tolerance=0.1,
        budget_s=3600,
        confidence=0.9,
        step_requests=20,
        min_step_s=1.0,
        warmup_s=0.0,
        sweep=5,
    )
    plan = CapacitySearch(copts, build_options({}, {"target": "http://127.0.0.1:9"}))
    assert plan.sweep_loads() == [1.0, 3.0, 5.0, 7.0, 9.0]
    phase = plan.phase(1, 4.0)
    assert (phase.rate, phase.users, phase.duration) == (4.0, copts.concurrency_cap, 5.0)
    plan = drive(copts, lambda rate: 40.0 * rate)  # 7 req/s: 280 ms, 9: 360 ms
    assert plan.result is not None and plan.result["reason"] == "sweep"
    assert (plan.result["lo"], plan.result["hi"]) == (7.0, 9.0)


def test_probes_take_the_fewest_requests_that_can_pass() -> None:
    copts = CapacityOptions(
        criteria=(Criterion(0.95, {"ttft": 600.0}),),
        open_loop=True,
        start=2.0,
        minimum=0.5,
        maximum=None,
        tolerance=0.1,
        budget_s=600,
        confidence=0.95,
    )
    assert copts.requests_per_step(probe=True) == 59 and copts.requests_per_step() == 118
    plan = CapacitySearch(copts, build_options({}, {"target": "http://127.0.0.1:9"}))
    assert plan.probing() and plan.phase(1, 2.0).duration == 29.5


def test_warmup_auto_judges_each_step_on_its_steady_part() -> None:
    copts = replace(
        CLOSED_LOOP,
        criteria=(Criterion(0.9, {"ttft": 300.0}),),
        step_requests=60,
        warmup_s=0.0,
        warmup_auto=True,
    )
    auto = drive(copts, lambda users: 45.0 * users, cold=15)
    assert auto.result is not None and (auto.result["lo"], auto.result["hi"]) == (6, 7)
    assert all(e["point"]["transient_dropped"] == 15 for e in auto.log)
    assert auto.info()["capacity"]["warmup"] == "auto"
    # the cold requests counted: a lower limit than the server's
    cold = drive(replace(copts, warmup_auto=False), lambda users: 45.0 * users, cold=15)
    assert cold.result is not None and (cold.result["lo"] or 0) < 6
