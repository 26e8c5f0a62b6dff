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
(``reports.gate.holm``) ranks.

Values that come in groups — a request's inter-token gaps — are not independent: a
request co-batched with a long prefill has several slow gaps together.  Resampling
the pooled gaps as if each were drawn on its own then gives an interval too narrow
(false alarms).  A side that knows its groups says how much wider the percentile's
sampling distribution is for them: the design effect (Kish) of the share of values
beyond the percentile, from the groups' totals (``design_effect``), and its
bootstrap draws as many values as that many independent ones would be worth
(``effective_n``; Woodruff's interval for a quantile of a cluster sample).  It is
never taken below 1: gaps that alternate around a schedule (jitter on token
times) do not narrow the interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmload.reports.gate.metrics import DOWN, LATENCY, SHARE, MetricSpec

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


#: the percentiles a baseline keeps a latency's design effect at (``design_effects``)
EFFECT_PERCENTILES = (50.0, 75.0, 90.0, 95.0, 99.0, 99.9)
#: a design effect's thresholds come from at most this many of the values
THRESHOLD_SAMPLE = 1_000_000


def design_effect(values: np.ndarray, groups: np.ndarray, q: float) -> float | None:
    """How many times wider the ``q``-th percentile's sampling variance is because ``values``
    come in groups (``groups``: each group's size, the values group by group, in order) than
    if they were independent: ``Var_cluster(p̂) / Var_iid(p̂)`` of ``p̂``, the share beyond the
    percentile, by the ratio estimator's linearized variance.  At least 1; None when the
    groups do not add up to the values or fewer than two groups hold any."""
    return design_effects(values, groups, (q,)).get(_key(q))


def design_effects(
    values: np.ndarray, groups: np.ndarray, qs: Sequence[float] = EFFECT_PERCENTILES
) -> dict[str, float]:
    """``design_effect`` at each of ``qs``, keyed ``"95"``, ``"99.9"`` (empty when unknown)."""
    sizes = np.asarray(groups, dtype=np.int64)
    total = int(sizes.sum())
    if total != values.size or total == 0 or np.count_nonzero(sizes) < 2:
        return {}
    sizes = sizes[sizes > 0]
    starts = np.cumsum(sizes) - sizes
    c = sizes.size
    # the thresholds from an evenly strided view of at most THRESHOLD_SAMPLE values: a
    # percentile of all of them would copy them (a million-request run's 66 M gaps: 0.5 GB),
    # and the share beyond the threshold is counted over every value all the same
    step = max(1, values.size // THRESHOLD_SAMPLE)
    out: dict[str, float] = {}
    for q, t in zip(qs, np.percentile(values[::step], list(qs)), strict=True):
        beyond = _beyond_per_group(values, starts, sizes, float(t))
        p = float(beyond.sum()) / total
        if p <= 0.0 or p >= 1.0:
            out[_key(q)] = 1.0
            continue
        resid = beyond - p * sizes
        v_cluster = c / (c - 1) * float(np.dot(resid, resid)) / total**2
        out[_key(q)] = max(1.0, v_cluster / (p * (1.0 - p) / total))
    return out


def _beyond_per_group(
    values: np.ndarray, starts: np.ndarray, sizes: np.ndarray, threshold: float
) -> np.ndarray:
    """How many of each group's values are above ``threshold``, a run of whole groups of at
    most ``CHUNK_VALUES`` values at a time (a sum over a mask widens it to int64: 8 bytes a
    value, 0.5 GB for a million-request run's gaps at once)."""
    ends = starts + sizes
    out = np.empty(sizes.size, dtype=np.int64)
    g0 = 0
    while g0 < sizes.size:
        g1 = max(g0 + 1, int(np.searchsorted(ends, starts[g0] + CHUNK_VALUES, side="right")))
        lo, hi = int(starts[g0]), int(ends[g1 - 1])
        out[g0:g1] = np.add.reduceat(values[lo:hi] > threshold, starts[g0:g1] - lo, dtype=np.int64)
        g0 = g1
    return out


def _key(q: float) -> str:
    return f"{q:g}"


def effect_at(effects: dict[str, float], q: float) -> float | None:
    """A stored design effect at ``q``: its own, else the larger of its stored neighbours."""
    if not effects:
        return None
    if _key(q) in effects:
        return float(effects[_key(q)])
    at = sorted((float(k), float(v)) for k, v in effects.items())
    below = [v for k, v in at if k < q][-1:]
    above = [v for k, v in at if k > q][:1]
    return max(below + above)


#: a check says how its grouped values were counted when a side's design effect passes this
GROUPED_EFFECT = 1.05


def effective_n(n: int, effect: float) -> int:
    """How many independent values ``n`` grouped ones are worth at design effect ``effect``."""
    return max(1, round(n / max(effect, 1.0)))


@dataclass(frozen=True)
class Side:
    """One side's sample: values (ms, per-second rates; for a share ``[failed]``) and its size.
    The values are the side's own: ``compare`` sorts a latency's in place.

    Grouped values (ITL: a request's gaps) say so by ``groups`` (each group's size, values
    in group order: a run's records) or ``effects`` (design effects a baseline stored)."""

    values: np.ndarray
    n: int
    groups: np.ndarray | None = None
    effects: dict[str, float] | None = None

    @classmethod
    def of(cls, values: Any, n: int | None = None, **grouping: Any) -> Side:
        arr = np.asarray(values, dtype=float)
        return cls(arr, int(arr.size if n is None else n), **grouping)

    def design_effect(self, q: float) -> float | None:
        """This side's design effect at percentile ``q``; None when its values are not grouped
        (or it cannot tell).  Read before ``compare`` sorts the values."""
        if self.groups is not None:
            return design_effect(self.values, self.groups, q)
        return effect_at(self.effects or {}, q)


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
    #: grouped values (ITL): each side's design effect (1: independent values)
    base_effect: float = 1.0
    run_effect: float = 1.0

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

    def resolves(self, alpha: float) -> float:
        """The smallest change in the harmful direction this check would fail: where its bound
        (at ``alpha``) reaches the limit once the bootstrap distribution moves with the change
        — scaled for a ratio, shifted for a share's difference.  What the sample can resolve,
        not a verdict: a true change there fails about half the time."""
        lo, hi = self.bounds(alpha)
        if self.spec.metric.harm == DOWN:
            if self.is_share:
                return self.change + (self.limit - hi)
            return self.change * self.limit / hi if hi > 0 else 0.0
        if self.is_share:
            return self.change + (self.limit - lo)
        return self.change * self.limit / lo if lo > 0 else math.inf

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
        de_b, de_r = base.design_effect(q), run.design_effect(q)
        # a side that cannot tell (a baseline from an older llmload) is taken to be like the other
        eff_b = de_b if de_b is not None else (de_r or 1.0)
        eff_r = de_r if de_r is not None else (de_b or 1.0)
        base.values.sort()  # in place: a side's values are its own (a run's ITL: 0.5 GB)
        run.values.sort()
        b_v = float(np.percentile(base.values, q))
        r_v = float(np.percentile(run.values, q))
        n_b, n_r = effective_n(base.n, eff_b), effective_n(run.n, eff_r)
        boots = bootstrap_ratio(base.values, n_b, run.values, n_r, q, resamples, seed, True)
        change = r_v / b_v if b_v > 0 else math.inf
        return Comparison(spec, mode, scope, b_v, r_v, change, boots, base.n, run.n, eff_b, eff_r)
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
