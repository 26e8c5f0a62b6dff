"""Exact statistics of numpy arrays: the same numbers ``MetricStats.of`` gives for a list.

``reports.schema.MetricStats.of`` sorts a list of Python floats and sums it with
``math.fsum``; for the tens of millions of token gaps of a long run that list
alone was gigabytes.  Here the values stay a float64 array: sorted by numpy,
the percentiles taken with the one percentile (``loadtests.percentile``) on it,
and the sum correctly rounded as ``math.fsum``'s is (``exact_sum``: the values
split into integer mantissas, summed exactly in integers per binary exponent),
so every field comes out bit for bit as from the list.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import cast

import numpy as np

from llmload.loadtests.percentile import percentile
from llmload.reports.schema import PERCENTILES, MetricStats

#: values per pass of ``exact_sum``: its float64 bucket sums of 27-bit integers stay exact
_CHUNK = 1 << 24
_HALF = 26


def exact_sum(values: np.ndarray) -> float:
    """The correctly rounded sum of finite float64 ``values`` (``math.fsum``'s result).

    Each value is ``M * 2**E`` with an integer mantissa ``M`` (53 bits); per exponent
    the mantissas' upper and lower halves are summed (float64 sums of integers below
    2**53, hence exact), and the exact total is rounded once, by ``float(Fraction)``.
    """
    total = Fraction(0)
    for start in range(0, len(values), _CHUNK):
        chunk = np.asarray(values[start : start + _CHUNK], dtype=np.float64)
        mant, exp = np.frexp(chunk)
        ints = np.ldexp(mant, 53).astype(np.int64)  # exact: |mant| < 1, 53 bits
        low = exp.min() if len(exp) else 0
        k = (exp - low).astype(np.intp)
        hi = np.bincount(k, weights=(ints >> _HALF).astype(np.float64))
        lo = np.bincount(k, weights=(ints & ((1 << _HALF) - 1)).astype(np.float64))
        for j in np.nonzero((hi != 0) | (lo != 0))[0].tolist():
            m = (int(hi[j]) << _HALF) + int(lo[j])
            e = int(low) + j - 53
            total += m * (Fraction(2) ** e)
    return float(total)


def finite_scaled_sorted(values: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """The finite values (NaN is a missing one), each times ``scale``, sorted (a new array)."""
    xs = values[np.isfinite(values)]
    if scale != 1.0:
        xs = xs * scale
    else:
        xs = xs.copy()
    xs.sort()
    return xs


def stats_of(values: np.ndarray, scale: float = 1.0) -> MetricStats:
    """``MetricStats.of`` of an array (missing values as NaN): the same fields, exactly."""
    xs = finite_scaled_sorted(values, scale)
    if not len(xs):
        return MetricStats()
    return stats_of_sorted(xs)


def percentile_sorted(xs: np.ndarray, p: float) -> float:
    """The one percentile (``loadtests.percentile``) of a sorted array, as a Python float."""
    return float(percentile(cast(Sequence[float], xs), p))


def stats_of_sorted(xs: np.ndarray) -> MetricStats:
    """``MetricStats`` of values already finite, scaled and sorted (not empty)."""
    p50, p90, p95, p99 = (percentile_sorted(xs, p) for p in PERCENTILES)
    n = len(xs)
    return MetricStats(n, p50, p90, p95, p99, exact_sum(xs) / n, float(xs[-1]))


def mean_and_std(xs: np.ndarray) -> tuple[float, float]:
    """``math.fsum(xs) / n`` and the population standard deviation, as ``vllm_bench`` had them."""
    n = len(xs)
    mean = exact_sum(xs) / n
    return mean, math.sqrt(exact_sum((xs - mean) ** 2) / n)
