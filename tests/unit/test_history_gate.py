"""The statistics of the gate across runs: Student's t, the run-level interval, change points."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmload.reports.gate.history import run_level
from llmload.reports.gate.metrics import parse_metrics
from llmload.reports.table.changepoints import change_points
from llmload.reports.table.tdist import t_ppf, t_sf

TTFT = parse_metrics("ttft", 95.0, 0.10)[0]


@pytest.mark.parametrize(
    ("df", "q95", "q975"),
    [
        (1, 6.3138, 12.7062),
        (2, 2.9200, 4.3027),
        (4, 2.1318, 2.7764),
        (9, 1.8331, 2.2622),
        (30, 1.6973, 2.0423),
        (math.inf, 1.6449, 1.9600),
    ],
)
def test_t_quantiles_match_the_tables(df: float, q95: float, q975: float) -> None:
    assert t_ppf(0.95, df) == pytest.approx(q95, abs=1e-3)
    assert t_ppf(0.975, df) == pytest.approx(q975, abs=1e-3)
    assert t_sf(q95, df) == pytest.approx(0.05, abs=1e-4)


def test_the_run_level_gate_keeps_its_false_alarms_and_finds_a_real_shift() -> None:
    # run-level values lognormal around 80 ms with the spread measured on the bundled
    # model (~5 % per 20 s run): an unchanged run fails far below 5 % of the time at the
    # +10 % allowance; a +20 % one on runs four times steadier is found nearly always
    rng = np.random.default_rng(3)
    trials, sigma = 2000, 0.05
    alarms = sum(
        run_level(
            TTFT,
            "stream",
            list(80 * np.exp(rng.normal(0, sigma, 5))),
            [80 * math.exp(rng.normal(0, sigma))],
        ).p_value()
        <= 0.05
        for _ in range(trials)
    )
    assert alarms / trials < 0.01
    # at the boundary (a true +10 %) the test is exact: about 5 % fail
    edge = sum(
        run_level(
            TTFT,
            "stream",
            list(np.exp(rng.normal(0, sigma, 5))),
            [1.1 * math.exp(rng.normal(0, sigma))],
        ).p_value()
        <= 0.05
        for _ in range(trials)
    )
    assert 0.03 < edge / trials < 0.07
    found = sum(
        run_level(
            TTFT,
            "stream",
            list(np.exp(rng.normal(0, 0.0125, 10))),
            [1.2 * math.exp(rng.normal(0, 0.0125))],
        ).p_value()
        <= 0.05
        for _ in range(500)
    )
    assert found / 500 > 0.95


def test_one_run_on_each_side_has_no_between_run_spread() -> None:
    assert run_level(TTFT, "stream", [80.0], [81.0]) is None
    three = run_level(TTFT, "stream", [80.0], [79.0, 82.0, 80.5])
    assert three is not None and three.df == 2 and three.width(0.05) > 1.7  # t(2) / z


def test_change_points_find_a_shift_and_leave_noise_alone() -> None:
    rng = np.random.default_rng(1)
    shifted = np.r_[rng.normal(80, 3, 12), rng.normal(96, 3, 8)]
    (c,) = change_points(shifted)
    assert c.index == 12 and c.after > c.before and c.p_value <= 0.05
    false = sum(bool(change_points(rng.normal(80, 3, 20), seed=s)) for s in range(40))
    assert false <= 5  # ~5 % at alpha 0.05
    assert change_points([80.0] * 5) == []  # too short to split


def test_runs_without_errors_are_values_too() -> None:
    # an error rate of 0 in every run is a run-level value (0.0), not a missing one
    error_rate = parse_metrics("error-rate", 95.0, 0.01)[0]
    level = run_level(error_rate, "stream", [0.0, 0.0, 0.0], [0.0])
    assert level is not None and level.p_value() == 1.0
    worse = run_level(error_rate, "stream", [0.0, 0.001, 0.0], [0.2])
    assert worse is not None and worse.p_value() < 0.05


def test_a_baseline_of_repeats_gives_each_repeat_as_a_run() -> None:
    from llmload.reports.gate.history import baseline_runs, run_value

    def doc(*values: float) -> dict[str, object]:
        return {"metrics": {"ttft": {"stream": {"n": len(values), "values_ms": list(values)}}}}

    pooled = {**doc(10, 12, 20, 22), "repeats": [doc(10, 12), doc(20, 22), doc()]}
    values = [run_value(s, TTFT, "stream") for s in baseline_runs(pooled, "stream")]
    # each repeat its own run (the empty one has no value); the pooled values are not a run
    assert values == [pytest.approx(11.9), pytest.approx(21.9), None]
    # a mode the repeats do not have, or one repeat: the document itself
    assert [s.doc for s in baseline_runs(pooled, "sync")] == [pooled]
    assert len(baseline_runs(doc(5, 6), "stream")) == 1
