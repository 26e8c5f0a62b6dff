"""Pure, exact statistics for reports: percentiles, distributions, binning.

A distribution's ``n p50 p90 p95 p99 mean max`` is ``reports.table.schema.MetricStats.of``.
Percentiles are the harness's one percentile (``loadtests.percentile``: linear
interpolation between closest ranks, numpy's default, Hyndman & Fan type 7).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence

import numpy as np

from llmload.loadtests.percentile import PERCENTILE_METHOD as PERCENTILE_METHOD
from llmload.loadtests.percentile import percentile as percentile
from llmload.reports.table.schema import PERCENTILES as PERCENTILES


def ecdf_points(values: Sequence[float], max_points: int = 200) -> list[tuple[float, float]]:
    """Points ``(value, fraction <= value)`` of the empirical CDF, at most ``max_points``."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return []
    if n <= max_points:
        return [(x, (i + 1) / n) for i, x in enumerate(xs)]
    step = (n - 1) / (max_points - 1)
    idx = sorted({round(i * step) for i in range(max_points)})
    return [(xs[i], (i + 1) / n) for i in idx]


def histogram(
    values: Sequence[float] | np.ndarray, bins: int = 40, scale: float = 1.0, inplace: bool = False
) -> tuple[list[float], list[int]]:
    """Equal-width histogram over [min, p99.5] of the values times ``scale``; the far tail
    goes in the last bin.

    A numpy array is not sorted: its minimum and p99.5 come from a partition of one
    scaled copy and each value's bin from one vectorised pass (the same bins and
    counts).  ``inplace``: the array is the caller's own, to be used up here.
    """
    if isinstance(values, np.ndarray):
        return _histogram_array(values, bins, scale, inplace)
    if scale != 1.0:
        values = [v * scale for v in values]
    xs = sorted(values)
    if not xs:
        return [], []
    lo, width = _window(xs[0], percentile(xs, 99.5), bins)

    def bin_of(x: float) -> int:
        return max(0, min(int((x - lo) / width), bins - 1))

    # bin_of never decreases along the sorted values: each bin's first index is a
    # binary search (the same counts as binning value by value, in 40 log2(n) steps)
    firsts = [bisect_left(xs, k, key=bin_of) for k in range(bins)] + [len(xs)]
    counts = [firsts[k + 1] - firsts[k] for k in range(bins)]
    return [lo + i * width for i in range(bins + 1)], counts


def _window(lo: float, hi: float, bins: int) -> tuple[float, float]:
    """(first edge, bin width) of the histogram of values from ``lo`` to p99.5 ``hi``."""
    if hi - lo < 0.02 * abs(lo) or hi <= lo:
        # (nearly) constant values: centre them in a +-10% window instead of a sliver
        mid = (lo + hi) / 2
        lo, hi = mid - 0.1 * abs(mid) - 1e-9, mid + 0.1 * abs(mid) + 1e-9
    return lo, (hi - lo) / bins


def _histogram_array(
    values: np.ndarray, bins: int, scale: float, inplace: bool
) -> tuple[list[float], list[int]]:
    if inplace and values.dtype == np.float64:
        xs = values
        xs *= scale
    else:
        xs = np.multiply(values, scale, dtype=np.float64)  # the one copy, used up here
    n = len(xs)
    if not n:
        return [], []
    h = (n - 1) * 99.5 / 100.0
    k = int(math.floor(h))
    xs.partition([k, min(k + 1, n - 1)])
    p = float(xs[k]) + (h - k) * (float(xs[min(k + 1, n - 1)]) - float(xs[k]))
    lo, width = _window(float(xs.min()), p, bins)
    xs -= lo  # the same (x - lo) / width as for a list, in place
    xs /= width
    np.clip(xs, 0, bins - 1, out=xs)
    total = np.zeros(bins, dtype=np.int64)
    for start in range(0, n, 1 << 22):  # bin numbers a block at a time: no int array of n
        total += np.bincount(xs[start : start + (1 << 22)].astype(np.intp), minlength=bins)
    counts = total.tolist()
    return [lo + i * width for i in range(bins + 1)], counts


def bin_width(span_s: float, max_bins: int = 240) -> float:
    """A readable time-bin width (1, 2, 5, 10, ... seconds) giving at most ``max_bins`` bins."""
    for width in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600):
        if span_s / width <= max_bins:
            return float(width)
    return math.ceil(span_s / max_bins)
