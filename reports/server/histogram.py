"""A phase's distribution from two cumulative histogram snapshots, and its quantiles.

The delta of the cumulative counts between the scrape before a phase and the
one after it is the phase's own histogram (the server observes each request
once, when it finishes).  Its mean is exact (``sum / count``); a quantile is
not: it is known to lie inside one bucket, ``(lo, hi]``, and
``histogram_quantile`` (Prometheus's rule, used here) places it by linear
interpolation inside that bucket, as if the observations there were spread
evenly.  So every quantile comes with its bucket, and the report says how wide
that is: vLLM's queue-time grid has a bucket from 0.5 s to 0.8 s, so "p95 0.66 s"
means "somewhere in 0.5–0.8 s"; the bundled server's grid keeps each bucket
within 5 % from 1 ms to 10 s (``llmload.common.buckets``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llmload.loadtests.run.promsample import Histo


@dataclass(frozen=True)
class Delta:
    """A histogram over a window: count, sum, and cumulative counts at the finite bounds."""

    count: float
    sum: float
    bounds: tuple[float, ...] = ()
    cum: tuple[float, ...] = ()

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


def delta(before: Histo | None, after: Histo) -> Delta:
    """``after - before`` (``before`` None: since the server started)."""
    if before is None:
        before = Histo()
    bounds = sorted(set(before.le) | set(after.le))
    cum = [max(0.0, after.count_at(b) - before.count_at(b)) for b in bounds]
    return Delta(
        max(0.0, after.count - before.count), after.sum - before.sum, tuple(bounds), tuple(cum)
    )


@dataclass(frozen=True)
class Quantile:
    """A histogram quantile: the interpolated value and the bucket ``(lo, hi]`` it lies in."""

    value: float
    lo: float
    hi: float

    def to_json(self, scale: float = 1.0) -> dict[str, Any]:
        hi = self.hi * scale if math.isfinite(self.hi) else None
        return {"value": self.value * scale, "lo": self.lo * scale, "hi": hi}


def quantile(d: Delta, q: float) -> Quantile | None:
    """Prometheus's ``histogram_quantile(q)`` over ``d``, with its bucket (None: no data or
    no buckets).  In the ``+Inf`` bucket it answers the highest finite bound, as Prometheus
    does, and ``hi`` is infinite."""
    if d.count <= 0 or not d.bounds:
        return None
    rank = q * d.count
    lo, below = 0.0, 0.0
    for bound, c in zip(d.bounds, d.cum, strict=True):
        if c >= rank and c > below:
            value = lo + (bound - lo) * (rank - below) / (c - below)
            return Quantile(value, lo, bound)
        lo, below = bound, c
    return Quantile(d.bounds[-1], d.bounds[-1], math.inf)


def stats(
    d: Delta, scale: float = 1000.0, qs: tuple[int, ...] = (50, 90, 95, 99)
) -> dict[str, Any]:
    """``{"n", "mean", "p50": {"value", "lo", "hi"}, ...}`` in ms (``scale``); quantiles need
    the buckets of a full scrape at both ends of the window."""
    out: dict[str, Any] = {"n": d.count, "mean": None if d.mean is None else d.mean * scale}
    for p in qs:
        found = quantile(d, p / 100.0)
        out[f"p{p}"] = None if found is None else found.to_json(scale)
    return out
