"""The capacity search's decisions (loadtests.run.capacity), driven by model targets."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from llmload.loadtests.run.capacity import (
    FAIL,
    PASS,
    UNRELIABLE,
    Done,
    Next,
    SearchConfig,
    Step,
    answer,
    bracket,
    crossing,
    decide,
)


def run_search(
    cfg: SearchConfig,
    ratio: Callable[[float], float],
    *,
    starved_at: float | None = None,
    saturated_at: float | None = None,
    budget_s: float = float("inf"),
    cost: Callable[[float], float] = lambda load: 10.0,
) -> tuple[list[Step], Done]:
    """Drive ``decide`` against a model whose SLO ratio at a load is ``ratio(load)``."""
    steps: list[Step] = []
    spent = 0.0
    while True:
        d = decide(cfg, steps, budget_s - spent, cost)
        if isinstance(d, Done):
            return steps, d
        assert isinstance(d, Next)
        again = [s for s in steps if s.load == d.load]
        assert all(s.verdict == UNRELIABLE for s in again), f"{d.load} tried twice: {steps}"
        spent += cost(d.load)
        if starved_at is not None and d.load >= starved_at:
            steps.append(Step(d.load, UNRELIABLE))
            continue
        r = ratio(d.load)
        sat = saturated_at is not None and d.load >= saturated_at
        steps.append(Step(d.load, PASS if r <= 1 else FAIL, r, sat))


def hockey(capacity: float) -> Callable[[float], float]:
    """Latency flat well below capacity, then climbing steeply through the limit."""
    return lambda x: 0.4 + 0.6 * (x / capacity) ** 6


@pytest.mark.parametrize("capacity", [0.7, 3.3, 7.4, 55.0, 900.0])
def test_rate_search_lands_within_tolerance(capacity: float) -> None:
    cfg = SearchConfig(start=1.0, minimum=0.1, tolerance=0.1)
    steps, done = run_search(cfg, hockey(capacity))
    assert done.reason == "converged"
    a = answer(cfg, steps, done.reason)
    assert a.lo is not None and a.hi is not None and a.estimate is not None
    assert a.lo <= capacity < a.hi
    assert a.hi - a.lo <= 0.1 * a.hi
    assert abs(a.estimate - capacity) <= 0.1 * capacity
    # doubling up to the first failure, then a handful of narrowing steps
    assert len(steps) <= math.log2(max(capacity, 1.0)) + 7


def test_users_search_is_exact_to_one_user() -> None:
    cfg = SearchConfig(start=1, minimum=1, integer=True, tolerance=0.05)
    # 11 users meet the SLO, 12 do not (ratio linear in users, as TPOT with ITL growth)
    steps, done = run_search(cfg, lambda u: (10 + 2 * (u - 1)) / 30.5)
    a = answer(cfg, steps, done.reason)
    assert done.reason == "converged"
    assert (a.lo, a.hi, a.estimate) == (11, 12, 11)
    assert all(s.load == int(s.load) for s in steps)


def test_interpolation_beats_bisection_on_a_smooth_curve() -> None:
    cfg = SearchConfig(start=1.0, minimum=0.1, tolerance=0.02)
    steps, done = run_search(cfg, lambda x: x / 13.7)
    assert done.reason == "converged"
    # plain bisection of the bracket [8, 16] to 2 % needs 5 narrowing steps after 5 to bracket
    assert len(steps) <= 8


def test_start_above_capacity_shrinks_then_narrows() -> None:
    cfg = SearchConfig(start=64.0, minimum=0.5, tolerance=0.1)
    steps, done = run_search(cfg, hockey(5.0))
    assert steps[0].verdict == FAIL and steps[1].load < steps[0].load
    a = answer(cfg, steps, done.reason)
    assert a.lo is not None and a.hi is not None and a.lo <= 5.0 < a.hi


def test_fails_at_the_minimum() -> None:
    cfg = SearchConfig(start=2.0, minimum=1.0)
    steps, done = run_search(cfg, lambda x: 3.0)
    assert done.reason == "below_minimum"
    a = answer(cfg, steps, done.reason)
    assert a.lo is None and a.hi == 1.0 and a.estimate is None


def test_a_saturating_target_stops_the_push() -> None:
    cfg = SearchConfig(start=1.0, minimum=0.1)
    # the SLO is lenient (never failed) but the target stops keeping up at 8
    steps, done = run_search(cfg, lambda x: 0.5, saturated_at=8.0)
    assert done.reason == "saturated"
    assert max(s.load for s in steps) < 16.0


def test_a_starved_step_is_run_again_once() -> None:
    cfg = SearchConfig(start=4.0, minimum=1.0)
    d = decide(cfg, [Step(4.0, UNRELIABLE)])
    assert isinstance(d, Next) and d.load == 4.0
    d = decide(cfg, [Step(4.0, UNRELIABLE), Step(4.0, PASS, 0.5)])
    assert isinstance(d, Next) and d.load > 4.0
    d = decide(cfg, [Step(4.0, UNRELIABLE), Step(4.0, UNRELIABLE)])
    assert isinstance(d, Next) and d.load == 2.0


def test_a_starved_harness_is_a_ceiling_not_a_failure() -> None:
    cfg = SearchConfig(start=1.0, minimum=0.1, tolerance=0.1)
    steps, done = run_search(cfg, hockey(100.0), starved_at=10.0)
    assert done.reason == "harness"
    a = answer(cfg, steps, done.reason)
    assert a.hi is None and a.lo is not None and 9.0 <= a.lo < 10.0


def test_maximum_caps_the_search() -> None:
    cfg = SearchConfig(start=1.0, minimum=0.1, maximum=6.0)
    steps, done = run_search(cfg, hockey(100.0))
    assert done.reason == "maximum"
    assert max(s.load for s in steps) == 6.0
    assert answer(cfg, steps, done.reason).lo == 6.0


def test_budget_ends_the_search_with_the_bracket_so_far() -> None:
    cfg = SearchConfig(start=1.0, minimum=0.1, tolerance=0.01)
    steps, done = run_search(cfg, hockey(20.0), budget_s=75.0, cost=lambda load: 10.0)
    assert done.reason == "budget"
    assert len(steps) == 7
    a = answer(cfg, steps, done.reason)
    assert a.lo is not None and a.hi is not None and a.lo <= 20.0 < a.hi


def test_max_steps() -> None:
    cfg = SearchConfig(start=1.0, minimum=0.1, tolerance=0.001, max_steps=4)
    steps, done = run_search(cfg, hockey(20.0))
    assert done.reason == "max_steps" and len(steps) == 4


def test_bracket_and_crossing() -> None:
    steps = [Step(4, PASS, 0.5), Step(8, FAIL, 1.5), Step(16, FAIL, 3.0), Step(2, PASS, 0.4)]
    lo, hi = bracket(steps)
    assert lo is not None and hi is not None and (lo.load, hi.load) == (4, 8)
    assert crossing(4, 0.5, 8, 1.5) == pytest.approx(6.0)
    assert crossing(4, None, 8, 1.5) == 6.0
    assert crossing(4, 0.9, 8, 100.0) == pytest.approx(4 + 0.1 * 4 / 9.1)
    # a pass above a failure (noise) does not widen the bracket
    lo, hi = bracket([*steps, Step(12, PASS, 0.9)])
    assert lo is not None and hi is not None and (lo.load, hi.load) == (4, 8)


def test_bad_config() -> None:
    with pytest.raises(ValueError):
        SearchConfig(start=0.5, minimum=1.0)
    with pytest.raises(ValueError):
        SearchConfig(start=1.0, minimum=1.0, tolerance=0)


def test_a_starved_load_inside_the_bracket_is_not_tried_a_third_time() -> None:
    cfg = SearchConfig(start=4.0, minimum=1.0, tolerance=0.1)
    steps = [
        Step(16, PASS, 0.3),
        Step(24, FAIL, 1.8, True),
        Step(20, UNRELIABLE),
        Step(20, UNRELIABLE),
    ]
    d = decide(cfg, steps)
    assert isinstance(d, Next) and 16 < d.load < 20
    steps.append(Step(d.load, PASS, 0.6))
    steps.append(Step(19.5, PASS, 0.9))
    d = decide(cfg, steps)
    assert isinstance(d, Done) and d.reason == "harness"


def test_a_load_that_rounds_onto_the_starved_ceiling_is_not_tried_again() -> None:
    cfg = SearchConfig(start=2.0, minimum=0.1)
    steps = [Step(6.33, PASS, 0.3), Step(12.7, UNRELIABLE), Step(12.7, UNRELIABLE)]
    d = decide(cfg, steps)  # twice 6.33 is 12.66, which rounds to the starved 12.7
    assert isinstance(d, Next) and 6.33 < d.load < 12.7


def test_a_saturated_failure_gives_no_interpolated_claim() -> None:
    cfg = SearchConfig(start=1.0, minimum=0.1)
    a = answer(cfg, [Step(9.5, PASS, 0.5), Step(12.7, FAIL, 0.8, True)], "harness")
    assert (a.lo, a.hi, a.estimate) == (9.5, 12.7, 9.5)
    a = answer(cfg, [Step(9.5, PASS, 0.5), Step(12.7, FAIL, 1.5)], "converged")
    assert a.estimate is not None and 9.5 < a.estimate < 12.7


def test_a_step_too_close_to_call_is_run_again_and_the_rerun_decides() -> None:
    cfg = SearchConfig(start=1.0, minimum=0.1)
    steps = [Step(4.0, PASS, 0.5), Step(8.0, FAIL, 0.97, uncertain=True)]
    d = decide(cfg, steps)
    assert isinstance(d, Next) and d.load == 8.0 and "close to call" in d.why
    steps.append(Step(8.0, PASS, 0.95))  # judged on both runs' requests: a pass
    lo, hi = bracket(steps)
    assert lo is not None and lo.load == 8.0 and hi is None
    d = decide(cfg, steps)
    assert isinstance(d, Next) and d.load > 8.0
    # still too close after the rerun: not sustained, no third run
    steps = [Step(4.0, PASS, 0.5), Step(8.0, FAIL, 0.97, uncertain=True)]
    steps.append(Step(8.0, FAIL, 0.99, uncertain=True))
    d = decide(cfg, steps)
    assert isinstance(d, Next) and 4.0 < d.load < 8.0
