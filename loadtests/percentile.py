"""The one percentile: linear interpolation between closest ranks (numpy's default, type 7).

For sorted values ``x[0..n-1]`` and ``p`` in [0, 100] the rank is
``h = (n - 1) * p / 100`` and the result ``x[⌊h⌋] + (h - ⌊h⌋) * (x[⌊h⌋+1] - x[⌊h⌋])``.
The reports, the live status line and the benchmarks all use it, so a p95 means
the same number wherever it is printed.  (The CI gate resamples with
``numpy.percentile``, the same method, vectorised.)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

PERCENTILE_METHOD = "linear interpolation between closest ranks (numpy default, Hyndman-Fan type 7)"


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) of already sorted values (a list or a numpy array),
    linear interpolation."""
    if not len(sorted_values):
        raise ValueError("percentile of an empty sample")
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile must be in [0, 100], got {p}")
    h = (len(sorted_values) - 1) * p / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = h - lo
    return sorted_values[lo] + frac * (sorted_values[hi] - sorted_values[lo])


def percentile_of(values: Iterable[float], p: float) -> float | None:
    """``percentile`` of unsorted values; None when there are none."""
    ordered = sorted(values)
    return percentile(ordered, p) if ordered else None
