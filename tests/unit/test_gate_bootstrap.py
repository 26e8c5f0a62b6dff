"""The gate's percentile bootstrap, drawn from order statistics, against drawing the resamples.

``resampled_percentile`` claims the same distribution as taking ``np.percentile`` of
``resamples`` resamples drawn with replacement (what the gate did before, at ``B × n``
values per side).  Compared by their whole distribution on skewed and small samples, at a
resample size equal to the sample's and larger (a baseline's quantile sketch stands for
more requests than it keeps).
"""

from __future__ import annotations

import collections
import itertools

import numpy as np
import pytest

from llmload.reports.gate.bootstrap import bootstrap_ratio, resampled_percentile

B = 20_000
QS = [5, 50, 95]


def _brute(values: np.ndarray, n: int, q: float, rng: np.random.Generator) -> np.ndarray:
    return np.asarray(np.percentile(values[rng.integers(0, values.size, size=(B, n))], q, axis=1))


@pytest.mark.parametrize(
    ("size", "n", "q"),
    [(40, 40, 95.0), (2000, 2000, 95.0), (300, 300, 99.0), (31, 31, 50.0), (5, 5, 95.0),
     (400, 1600, 95.0)],
)  # fmt: skip
def test_same_distribution_as_drawing_the_resamples(size: int, n: int, q: float) -> None:
    gen = np.random.default_rng(size + n)
    values = np.concatenate(
        [gen.exponential(10.0, size // 2), gen.triangular(0, 5, 40, size - size // 2)]
    )
    brute = _brute(values, n, q, np.random.default_rng(1))
    exact = resampled_percentile(values, n, q, B, np.random.default_rng(2))
    # every value is one the resamples could have taken: within the sample's range
    assert values.min() <= exact.min() and exact.max() <= values.max()
    # two-sample Kolmogorov–Smirnov distance: 0.02 is ~1.5× its 95 % point at B = 20,000
    brute, exact = brute.round(9), exact.round(9)  # (one value, two float roundings)
    grid = np.union1d(brute, exact)
    cdf_b = np.searchsorted(np.sort(brute), grid, side="right") / B
    cdf_e = np.searchsorted(np.sort(exact), grid, side="right") / B
    assert float(np.abs(cdf_b - cdf_e).max()) < 0.02, (
        np.percentile(brute, QS),
        np.percentile(exact, QS),
    )


def test_five_values_match_every_resample_enumerated() -> None:
    values = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    every = np.array(list(itertools.product(range(5), repeat=5)))  # all 3,125, alike likely
    want = collections.Counter(np.percentile(values[every], 95, axis=1).round(9).tolist())
    got = collections.Counter(
        resampled_percentile(values, 5, 95.0, 200_000, np.random.default_rng(5)).round(9).tolist()
    )
    assert set(got) <= set(want)
    for v, k in want.items():  # each atom's share within 4 standard errors of its probability
        p = k / len(every)
        assert abs(got[v] / 200_000 - p) <= 4 * (p * (1 - p) / 200_000) ** 0.5 + 1e-4, v


def test_a_shifted_run_shifts_the_ratio_and_the_seed_fixes_it() -> None:
    gen = np.random.default_rng(7)
    base = gen.triangular(0, 5, 40, 5000)
    run = base * 1.2
    ratios = bootstrap_ratio(base, base.size, run, run.size, 95.0, 2000, seed=3)
    assert 1.15 < float(np.median(ratios)) < 1.25
    assert np.array_equal(ratios, bootstrap_ratio(base, base.size, run, run.size, 95.0, 2000, 3))
    same = bootstrap_ratio(base, base.size, base.copy(), base.size, 95.0, 2000, seed=3)
    assert 0.97 < float(np.median(same)) < 1.03


def test_a_million_values_cost_a_sort_not_b_times_n() -> None:
    # drawing 2,000 resamples of 10 M values would be 2e10 draws; the order statistics
    # need two Beta draws per resample, so this returns (the test would time out otherwise)
    values = np.random.default_rng(0).exponential(10.0, 10_000_000)
    out = resampled_percentile(values, values.size, 95.0, 2000, np.random.default_rng(1))
    assert out.shape == (2000,)
    assert abs(float(np.median(out)) - float(np.percentile(values, 95))) < 0.05
