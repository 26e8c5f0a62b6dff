"""One metric of one group, run against baseline: the observed change and its bootstrap.

The change is a ratio ``run / baseline`` of the statistic (a latency's percentile,
a rate's mean per second) or, for a share (the error rate), a difference in
points.  Its uncertainty comes from a seeded bootstrap that resamples *both*
sides (``resamples`` times): requests for a latency, seconds for a rate, and for
a share a binomial draw at each side's observed rate.  A percentile's resamples
are not drawn value by value: its bootstrap distribution comes exactly from two
order statistics per resample (``resampled_percentile``), so a side costs a sort.
The p-value of "no worse than allowed" is the share of bootstrap changes on the
allowed side of the limit (``(k + 1) / (B + 1)``): what the family-wise procedure
(``reports.holm``) ranks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmload.reports.gate_metrics import DOWN, LATENCY, SHARE, MetricSpec

#: a resample draws at most this many values at once (memory per chunk)
CHUNK_VALUES = 4_000_000


def bootstrap_ratio(
    base: np.ndarray,
    base_n: int,
    run: np.ndarray,
    run_n: int,
    q: float,
    resamples: int,
    seed: int,
    presorted: bool = False,
) -> np.ndarray:
    """Bootstrap distribution of ``P_q(run*) / P_q(base*)``; ``*_n`` is each resample's size."""
    rng = np.random.default_rng(seed)
    b = resampled_percentile(base, base_n, q, resamples, rng, presorted)
    r = resampled_percentile(run, run_n, q, resamples, rng, presorted)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b > 0, r / np.where(b > 0, b, 1.0), math.inf)


def resampled_percentile(
    values: np.ndarray,
    n: int,
    q: float,
    resamples: int,
    rng: np.random.Generator,
    presorted: bool = False,
) -> np.ndarray:
    """The ``q``-th percentile (numpy's linear one) of ``resamples`` bootstrap resamples of
    ``n`` values drawn from ``values`` — drawn exactly, without drawing the resamples.

    A resample is ``n`` uniform draws ``U`` mapped through the sample's quantile function
    (``sorted[floor(U * size)]``, one value of ``values`` each, all alike likely), and that
    map keeps order: the resample's ``k``-th smallest value is the sorted sample at the
    ``k``-th smallest of the ``U``, which is Beta(k, n + 1 - k); the next one up is the
    least of the ``n - k`` draws above it, ``U_k + (1 - U_k) Beta(1, n - k)``.  The
    percentile sits between those two at ``h = (n - 1) q / 100``.  So a resample costs
    two Beta draws instead of ``n`` values: a million-request run's ITL (66 M gaps) gates
    in the time of a sort, where drawing 2,000 resamples of it would take hours.  ``presorted``:
    ``values`` is sorted already (no copy)."""
    xs = np.asarray(values, dtype=float)
    if not presorted:
        xs = np.sort(xs)
    size = xs.size
    h = (n - 1) * q / 100.0
    k = min(int(math.floor(h)), n - 1)  # 0-based: the (k + 1)-th smallest
    frac = h - k
    u = rng.beta(k + 1, n - k, size=resamples)

    def at(p: np.ndarray) -> np.ndarray:
        return xs[np.minimum((p * size).astype(np.int64), size - 1)]

    low = at(u)
    if frac <= 0.0 or k + 1 >= n:
        return low
    u_next = u + (1.0 - u) * rng.beta(1, n - k - 1, size=resamples)
    return low + frac * (at(u_next) - low)


def _resampled(
    base: np.ndarray,
    base_n: int,
    run: np.ndarray,
    run_n: int,
    stat: Callable[[np.ndarray], np.ndarray],
    resamples: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """``stat`` of ``resamples`` resamples of each side (``base_n`` / ``run_n`` values each)."""
    out_b, out_r = np.empty(resamples), np.empty(resamples)
    chunk = max(1, CHUNK_VALUES // max(base_n, run_n, 1))
    for start in range(0, resamples, chunk):
        k = min(chunk, resamples - start)
        out_b[start : start + k] = stat(base[rng.integers(0, base.size, size=(k, base_n))])
        out_r[start : start + k] = stat(run[rng.integers(0, run.size, size=(k, run_n))])
    return out_b, out_r


def ratio_bounds(ratios: Any, confidence: float) -> tuple[float, float]:
    """The one-sided ``confidence`` bounds of bootstrapped run/baseline changes."""
    alpha = 1.0 - confidence
    lo, hi = (float(x) for x in np.quantile(ratios, [alpha, 1.0 - alpha]))
    return lo, hi


@dataclass(frozen=True)
class Side:
    """One side's sample: values (ms, per-second rates; for a share ``[failed]``) and its size.
    The values are the side's own: ``compare`` sorts a latency's in place."""

    values: np.ndarray
    n: int

    @classmethod
    def of(cls, values: Any, n: int | None = None) -> Side:
        arr = np.asarray(values, dtype=float)
        return cls(arr, int(arr.size if n is None else n))


@dataclass(frozen=True)
class Comparison:
    """A metric of one mode and scope (all requests, or one scenario): both values, the change,
    and the bootstrap distribution of the change."""

    spec: MetricSpec
    mode: str
    scope: str
    base_value: float
    run_value: float
    change: float
    boots: np.ndarray
    base_n: int
    run_n: int

    @property
    def is_share(self) -> bool:
        return self.spec.metric.kind == SHARE

    @property
    def neutral(self) -> float:
        """The change that means "no change" (a ratio of 1, a difference of 0)."""
        return 0.0 if self.is_share else 1.0

    @property
    def limit(self) -> float:
        """The largest allowed change in the harmful direction."""
        if self.spec.metric.harm == DOWN:
            return self.neutral - self.spec.allowed
        return self.neutral + self.spec.allowed

    def harmful(self, x: float, by: float = 1.0) -> bool:
        """Is change ``x`` beyond ``by`` times the allowance, in the harmful direction?"""
        step = by * self.spec.allowed
        if self.spec.metric.harm == DOWN:
            return x < self.neutral - step
        return x > self.neutral + step

    def p_value(self) -> float:
        """P(no worse than allowed), from the bootstrap: the share on the allowed side."""
        if self.spec.metric.harm == DOWN:
            ok = int(np.count_nonzero(self.boots >= self.limit))
        else:
            ok = int(np.count_nonzero(self.boots <= self.limit))
        return (ok + 1) / (self.boots.size + 1)

    def bounds(self, alpha: float) -> tuple[float, float]:
        """The ``alpha`` and ``1 - alpha`` quantiles of the bootstrapped change."""
        return ratio_bounds(self.boots, 1.0 - alpha)

    def pct(self, x: float) -> float:
        """A change in percent (a ratio) or in points (a share)."""
        return x * 100 if self.is_share else (x - 1) * 100


def compare(
    spec: MetricSpec,
    mode: str,
    scope: str,
    base: Side,
    run: Side,
    resamples: int,
    seed: int,
) -> Comparison:
    """Compare ``run`` with ``base`` on ``spec``'s statistic, with its bootstrap."""
    rng = np.random.default_rng(seed)
    kind = spec.metric.kind
    if kind == SHARE:
        bn, rn = base.n, run.n
        pb, pr = float(base.values.sum()) / bn, float(run.values.sum()) / rn
        boots = rng.binomial(rn, pr, resamples) / rn - rng.binomial(bn, pb, resamples) / bn
        return Comparison(spec, mode, scope, pb, pr, pr - pb, boots, bn, rn)
    if kind == LATENCY:
        q = float(spec.percentile or 95.0)
        base.values.sort()  # in place: a side's values are its own (a run's ITL: 0.5 GB)
        run.values.sort()
        b_v = float(np.percentile(base.values, q))
        r_v = float(np.percentile(run.values, q))
        boots = bootstrap_ratio(base.values, base.n, run.values, run.n, q, resamples, seed, True)
    else:
        b_v, r_v = float(base.values.mean()), float(run.values.mean())
        b, r = _resampled(
            base.values,
            base.n,
            run.values,
            run.n,
            lambda x: np.asarray(x.mean(axis=1)),
            resamples,
            rng,
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            boots = np.where(b > 0, r / np.where(b > 0, b, 1.0), math.inf)
    change = r_v / b_v if b_v > 0 else math.inf
    return Comparison(spec, mode, scope, b_v, r_v, change, boots, base.n, run.n)
