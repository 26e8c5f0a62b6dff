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


def _fail_rate(rng: np.random.Generator, sigma: float, k: int, n: int, change: float) -> float:
    trials = 2000
    fails = sum(
        run_level(
            TTFT,
            "stream",
            list(np.exp(rng.normal(0, sigma, k))),
            list(change * np.exp(rng.normal(0, sigma, n))),
        ).p_value()
        <= 0.05
        for _ in range(trials)
    )
    return fails / trials


def test_what_a_history_can_see_is_what_it_fails() -> None:
    # the check says how often it fails +20 % (twice the allowance) and how many runs would
    # make that 95 %: both against simulated gates of lognormal run-level values
    rng = np.random.default_rng(5)
    sigma = 0.02  # one run resolves +20 % against a long enough history below ~2.6 %
    # a RunLevel whose estimated spread is the true one: many runs, then its K and N asked
    known = run_level(TTFT, "stream", list(np.exp(rng.normal(0, sigma, 4000))), [1.0])
    assert known is not None and known.spread == pytest.approx(sigma, rel=0.05)
    k, n = known.runs_needed(0.05)
    assert k is not None and n == 1 and 5 <= k <= 40
    assert _fail_rate(rng, sigma, k, 1, 1.2) >= 0.93
    # the power it states for a history of 3 is what 3 runs give (within a few points)
    assert abs(_power_at(sigma, 3, 1) - _fail_rate(rng, sigma, 3, 1, 1.2)) < 0.05
    # a spread no history can beat for one run: it says so, and names the repeats that do
    wide = run_level(TTFT, "stream", list(np.exp(rng.normal(0, 0.13, 4000))), [1.0])
    assert wide is not None
    history, repeats = wide.runs_needed(0.05)
    assert history is None and repeats is not None and 10 < repeats < 40


def _power_at(sigma: float, k: int, n: int) -> float:
    from llmload.reports.gate.history import _power

    gap = math.log(1.2) - math.log(1.1)
    return _power(gap, sigma * math.sqrt(1 / k + 1 / n), k + n - 2, 0.05)


@pytest.mark.parametrize(
    ("spread", "says"),
    [
        (0.01, "fails from +12.6%, and +20.0% 100% of the time"),
        (0.02, "93% of the time"),
        (0.02, "a history of 7 runs"),
        (0.05, "31% of the time"),
        (0.05, "5 runs of each build"),
        (0.13, "10% of the time"),
        (0.13, "27 runs of each build"),
    ],
)
def test_the_figures_docs_quote_are_what_the_gate_says(spread: float, says: str) -> None:
    # docs/reports.md quotes one run against a history of 5 at these exact spreads
    from pathlib import Path

    from llmload.reports.gate.history import sees

    logs = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
    logs *= spread / math.sqrt((logs**2).sum() / 4)  # pooled with one run: exactly ``spread``
    level = run_level(TTFT, "stream", list(np.exp(logs)), [1.0])
    assert level is not None and level.spread == pytest.approx(spread)
    assert says in sees(level, 0.05)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "reports.md").read_text()
    assert f"{says}" in " ".join(docs.split())


def test_pairs_run_in_turn_cancel_the_drift_a_history_reads_as_spread() -> None:
    from llmload.reports.gate.history import paired_level, sees

    # the machine drifts ±25 % over the runs, and each pair's twins move together: the
    # paired check sees a steady +20 % (fail) and a steady 0 % (pass); the same values
    # read as unpaired runs spread too widely to tell either
    rng = np.random.default_rng(11)
    drift = np.exp(rng.normal(0, 0.25, 5))
    jitter = np.exp(rng.normal(0, 0.01, 5))
    base = list(80 * drift)
    worse = paired_level(TTFT, "stream", base, list(96 * drift * jitter))
    same = paired_level(TTFT, "stream", base, list(80 * drift * jitter))
    assert worse is not None and same is not None and worse.paired and worse.df == 4
    assert worse.p_value() < 0.01 and math.expm1(worse.worse) == pytest.approx(0.2, abs=0.03)
    assert same.p_value() > 0.5 and same.spread < 0.03
    loose = run_level(TTFT, "stream", base, list(96 * drift * jitter))
    assert loose is not None and loose.p_value() > 0.05
    # what it can see is said in pairs: a wide spread names the --repeat that would do
    wide = paired_level(TTFT, "stream", [1.0, 1.0, 1.0], [1.0, 1.15, 0.87])
    assert wide is not None
    history, pairs = wide.runs_needed(0.05)
    assert history is None and pairs is not None and pairs > 3
    assert _paired_fail_rate(rng, wide.spread, pairs, 1.2) >= 0.93
    assert f"{pairs} pairs (--repeat {pairs} with --baseline-target)" in sees(wide, 0.05)
    assert wide.sample() == "3 pairs run in turn on the two targets"
    # one pair, or pairs that do not match up, give no interval
    assert paired_level(TTFT, "stream", [80.0], [81.0]) is None
    assert paired_level(TTFT, "stream", [80.0, 81.0], [81.0]) is None


def test_the_paired_check_keeps_its_false_alarms_at_the_allowance_edge() -> None:
    from llmload.reports.gate.history import paired_level

    rng = np.random.default_rng(13)
    trials, sigma = 2000, 0.05
    # a true +10 % (the allowance) fails about 5 % of the time, whatever the drift
    edge = 0
    for _ in range(trials):
        drift = np.exp(rng.normal(0, 0.3, 3))
        run = 1.1 * drift * np.exp(rng.normal(0, sigma, 3))
        lv = paired_level(TTFT, "stream", list(drift), list(run))
        assert lv is not None
        edge += lv.p_value() <= 0.05
    assert 0.03 < edge / trials < 0.07


def _paired_fail_rate(rng: np.random.Generator, sigma: float, pairs: int, change: float) -> float:
    from llmload.reports.gate.history import paired_level

    trials, fails = 1000, 0
    for _ in range(trials):
        drift = np.exp(rng.normal(0, 0.2, pairs))
        run = change * drift * np.exp(rng.normal(0, sigma, pairs))
        lv = paired_level(TTFT, "stream", list(drift), list(run))
        assert lv is not None
        fails += lv.p_value() <= 0.05
    return fails / trials


def test_a_history_of_pairs_lends_its_spread_not_its_changes() -> None:
    from llmload.reports.gate.history import paired_level

    # earlier paired runs compared other builds (+65 %, −26 %): about their own means
    # their pairs stray by ~2 %, and that, not their changes, is what is pooled
    earlier = [[0.50, 0.52, 0.48], [-0.30, -0.31, -0.29], [0.1]]  # a one-pair run adds nothing
    base = [100.0, 90.0, 110.0]
    run = [118.0, 95.0, 124.0]  # its own three pairs stray more: +17 %, +5 %, +12 %
    alone = paired_level(TTFT, "stream", base, run)
    pooled = paired_level(TTFT, "stream", base, run, earlier)
    assert alone is not None and pooled is not None
    assert pooled.df == alone.df + 4 and pooled.earlier == 2
    assert pooled.worse == pytest.approx(alone.worse)
    assert pooled.spread < alone.spread and pooled.bounds(0.05)[0] > alone.bounds(0.05)[0]
    assert "pooled with 2 earlier paired runs" in pooled.sample()
    # one pair of its own is enough once a history lends the spread
    single = paired_level(TTFT, "stream", [100.0], [130.0], earlier)
    assert single is not None and single.df == 4 and single.p_value() < 0.01
    assert paired_level(TTFT, "stream", [100.0], [130.0]) is None


def test_a_quantiles_sampling_error_is_the_spread_of_its_samples() -> None:
    from llmload.reports.gate.sampling import quantile_error

    # 2,000 phases of 200 lognormal TTFTs: the p95's log spread from phase to phase is
    # what one phase's order statistics say it is
    rng = np.random.default_rng(17)
    draws = np.exp(rng.normal(np.log(80.0), 0.6, (2000, 200)))
    seen = float(np.std(np.log(np.percentile(draws, 95, axis=1))))
    told = float(np.mean([quantile_error(d, 0.95) for d in draws[:200]]))
    assert told == pytest.approx(seen, rel=0.15)
    assert quantile_error(np.full(50, 80.0), 0.95) == 0.0  # no spread, no error


def test_a_pairs_spread_is_told_apart_and_says_what_would_narrow_it() -> None:
    from llmload.reports.gate.history import paired_level, sees

    # five pairs whose differences spread ~8 %, all of it their requests' sampling
    # error: longer phases would do, and the phases they name do, simulated
    base, run = [100.0] * 5, [112.0, 98.0, 121.0, 105.0, 109.0]
    sampled = paired_level(TTFT, "stream", base, run, sampling=[0.08**2] * 5)
    assert sampled is not None and sampled.sampling == pytest.approx(0.08)
    assert sampled.excess() == pytest.approx(0.0, abs=0.03)
    longer = sampled.longer_phases(0.05)
    assert longer is not None and longer > 1
    said = sees(sampled, 0.05)
    assert f"these 5 pairs with phases {longer}× as long (--duration)" in said, said
    assert "sampling error" in said
    rng = np.random.default_rng(19)
    assert _paired_fail_rate(rng, 0.08 / math.sqrt(longer), 5, 1.2) >= 0.93
    # three such pairs have 2 degrees of freedom: no length within reach would do
    three = paired_level(TTFT, "stream", base[:3], run[:3], sampling=[0.08**2] * 3)
    assert three is not None and three.longer_phases(0.05) is None
    # the same spread with little of it sampling: only more pairs would do
    strays = paired_level(TTFT, "stream", base, run, sampling=[0.01**2] * 5)
    assert strays is not None and strays.longer_phases(0.05) is None
    assert "longer phases alone would not do" in sees(strays, 0.05)
    # without the phases' records (a history entry) the split is not told
    bare = paired_level(TTFT, "stream", base, run)
    assert bare is not None and bare.excess() is None and "sampling" not in sees(bare, 0.05)


def test_a_drop_reads_as_the_bootstrap_check_reads_it() -> None:
    from llmload.reports.gate.history import paired_level

    # throughput 12.7 % lower in each pair: shown as −12.7 % (run / baseline − 1), its
    # allowance the bootstrap check's ratio limit (0.9: −10 %, not 1 / 1.1)
    (tput,) = parse_metrics("throughput", 95.0, 0.10)
    lv = paired_level(tput, "stream", [1000.0, 980.0, 1010.0], [873.0, 855.6, 881.7])
    assert lv is not None
    assert lv.shown(lv.worse) == "-12.7%"
    assert lv.change(lv.allowed()) == pytest.approx(-0.10)
    assert lv.change(lv.twice()) == pytest.approx(-0.20)
    assert lv.p_value() < 0.05  # three steady pairs, −12.7 % against −10 % allowed
    edge = paired_level(tput, "stream", [1000.0, 980.0, 1010.0], [905.0, 882.0, 909.0])
    assert edge is not None and edge.p_value() > 0.05  # −9.6 %, −10 %, −10 %: not beyond
