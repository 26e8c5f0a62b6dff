"""Exact statistics of numpy arrays: the same numbers ``MetricStats.of`` gives for a list.

``reports.table.schema.MetricStats.of`` sorts a list of Python floats and sums it with
``math.fsum``; for the tens of millions of token gaps of a long run that list
alone was gigabytes.  Here the values stay a float64 array: sorted by numpy,
the percentiles taken with the one percentile (``loadtests.percentile``) on it,
and the sum correctly rounded as ``math.fsum``'s is (``exact_sum``: the values
split into integer mantissas, summed exactly in integers per binary exponent),
so every field comes out bit for bit as from the list.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import Any, cast

import numpy as np

from llmload.loadtests.percentile import percentile
from llmload.reports.table.schema import PERCENTILES, MetricStats

#: values per pass of ``_integer_sum``: its float64 bucket sums of 27-bit integers stay exact
_CHUNK = 1 << 24
_HALF = 26
#: ``_extended_sum``'s rows: each summed by numpy (pairwise) in 80-bit extended precision
_ROW = 8192
#: that format's unit roundoff, when numpy's longdouble is it (x86)
_LONG = np.finfo(np.longdouble)
_U = float(_LONG.epsneg) if _LONG.nmant >= 63 else None
#: rounding errors allowed per row sum, in units of ``_U`` times the row's sum of |x|: a
#: pairwise sum of 8192 values has at most ~log2(8192) + 16 (numpy's 8-way unrolled
#: blocks of 128) in any one value's path; twice that, for the conversions and margin
_ROW_ERRORS = 64


Transform = Callable[[np.ndarray], np.ndarray]


def exact_sum(values: np.ndarray, each: Transform | None = None) -> float:
    """The correctly rounded sum of finite float64 ``values`` (``math.fsum``'s result),
    or of ``each(values)`` applied a block at a time (no second array the size of
    ``values``: ``each=lambda x: (x - mean) ** 2`` for a variance).

    Fast path: every row of 8,192 values summed in 80-bit extended precision, the row
    sums added exactly (as fractions), with a bound on what the row sums can be off
    by; when the exact total within that bound rounds to one float64 — all but about
    one sum in a hundred of latencies — that is the answer.  Otherwise
    ``_integer_sum`` (exact).
    """
    values = np.asarray(values, dtype=np.float64)
    if _U is not None and len(values):
        fast = _extended_sum(values, each)
        if fast is not None:
            return fast
    return _integer_sum(values, each)


def _blocks(values: np.ndarray, size: int, each: Transform | None) -> Iterator[np.ndarray]:
    for start in range(0, len(values), size):
        block = values[start : start + size]
        yield block if each is None else np.asarray(each(block), dtype=np.float64)


def _extended_sum(values: np.ndarray, each: Transform | None) -> float | None:
    assert _U is not None
    sums: list[Any] = []
    sizes: list[float] = []
    for block in _blocks(values, _ROW * 256, each):
        full = len(block) - len(block) % _ROW
        rows = block[:full].reshape(-1, _ROW)
        sums += list(rows.sum(axis=1, dtype=np.longdouble))
        if float(block.min()) >= 0:  # latencies, squares: |x| is x
            sizes += rows.sum(axis=1).tolist()
        else:
            sizes += np.abs(rows).sum(axis=1).tolist()
        if full < len(block):
            tail = block[full:]
            sums.append(tail.sum(dtype=np.longdouble))
            sizes.append(float(np.abs(tail).sum()))
    total = sum((Fraction(*s.as_integer_ratio()) for s in sums), Fraction(0))
    # each |x| sum in float64 is itself off by at most n * 2**-53 of itself: doubled
    error = Fraction(_ROW_ERRORS * _U * 2.0) * Fraction(math.fsum(sizes))
    lo, hi = float(total - error), float(total + error)
    return lo if lo == hi else None


def _integer_sum(values: np.ndarray, each: Transform | None = None) -> float:
    """The exact sum, rounded once: each value ``M * 2**E`` with an integer mantissa ``M``
    (53 bits); per exponent the mantissas' upper and lower halves are summed (float64
    sums of integers below 2**53, hence exact), the total rounded by ``float(Fraction)``."""
    total = Fraction(0)
    for chunk in _blocks(values, _CHUNK, each):
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


def finite_scaled_sorted(
    values: np.ndarray, scale: float = 1.0, inplace: bool = False
) -> np.ndarray:
    """The finite values (NaN is a missing one), each times ``scale``, sorted: a new array,
    the only one as large as ``values`` — or ``values`` itself, reordered, when
    ``inplace`` and they are all finite."""
    finite = np.isfinite(values)
    if finite.all():
        if inplace:
            xs = values
            xs *= scale
        else:
            xs = values * scale
    else:
        xs = values[finite]
        xs *= scale
    del finite
    xs.sort()
    return xs


def stats_of(values: np.ndarray, scale: float = 1.0, inplace: bool = False) -> MetricStats:
    """``MetricStats.of`` of an array (missing values as NaN): the same fields, exactly.

    ``inplace``: ``values`` is the caller's own, to be scaled and sorted where it is."""
    xs = finite_scaled_sorted(values, scale, inplace)
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
    """``math.fsum(xs) / n`` and the population standard deviation (squares ``x * x``,
    correctly rounded: Python's ``x ** 2``, libm's ``pow``, is an ulp off for about one
    value in a thousand, so a list's std can differ from this in its last digits)."""
    n = len(xs)
    mean = exact_sum(xs) / n
    return mean, math.sqrt(exact_sum(xs, lambda x: (x - mean) ** 2) / n)
