"""The capacity gate (reports.gate.capacity): a real drop fails, noise and no-crossing do not."""

from __future__ import annotations

import random

import pytest

from llmload.reports.gate.capacity import capacity_check, estimate
from llmload.reports.gate.verdict import FAIL, INCONCLUSIVE, PASS, GateConfig

LOADS = [1.0, 2.0, 4.0, 8.0, 16.0]


def doc(per_unit: float, n: int = 200, seed: int = 0, lo: float = 9.0, hi: float = 10.0) -> dict:
    """Steps whose TPOT-like score grows linearly with load: ratio ``per_unit * load``."""
    rng = random.Random(seed)
    steps = [
        {"load": x, "n": n, "scores": [[per_unit * x * rng.uniform(0.9, 1.0) for _ in range(n)]]}
        for x in LOADS
    ]
    answer = {"lo": lo, "hi": hi, "estimate": None, "reason": "converged"}
    return {"unit": "users", "quantiles": [0.95], "steps": steps, "answer": answer}


def test_estimate_interpolates_the_first_crossing() -> None:
    assert estimate([1, 2, 4], [0.5, 0.8, 1.4]) == pytest.approx(2 + 0.2 / 0.6 * 2)
    assert estimate([1, 2], [0.5, 0.9]) is None
    assert estimate([1, 2], [1.5, 2.0]) is None


def test_same_capacity_passes_and_a_real_drop_fails() -> None:
    cfg = GateConfig(metric="capacity", resamples=300, max_regression=0.10)
    base = doc(0.1)  # crosses 1 near load 10
    same = capacity_check(doc(0.1, seed=1), base, cfg)
    assert same.verdict == PASS, same.reason
    worse = capacity_check(doc(0.13, seed=2), base, cfg)  # capacity ~23 % lower
    assert worse.verdict == FAIL, worse.reason
    assert worse.numbers["change_pct"] < -15
    better = capacity_check(doc(0.08, seed=3), base, cfg)
    assert better.verdict == PASS


def test_no_crossing_or_a_coarse_search_is_inconclusive() -> None:
    cfg = GateConfig(metric="capacity", resamples=200)
    never = capacity_check(doc(0.01), doc(0.1), cfg)
    assert never.verdict == INCONCLUSIVE and "never cross" in never.reason
    coarse = capacity_check(doc(0.1, lo=4.0, hi=16.0), doc(0.1), cfg)
    assert coarse.verdict == INCONCLUSIVE and "coarse" in coarse.reason
