"""How much of a phase's run-level value is its own requests' sampling error.

A paired check (``reports.gate.history.paired_level``) sees how much one pair's
difference strays from the next.  That spread has two parts: the **sampling error**
of each phase's statistic — which requests the phase happened to draw, what one
more or one fewer long prompt did to its p95 — and what is left, an **excess**
between pairs (the server's state, the machine, the order of the phases).  Longer
phases shrink the first (in proportion to their requests), only more pairs shrink
the second.  This module gives the first for one phase, on the check's scale, so
the gate can say which of the two would narrow its interval:

* a latency percentile: half the log distance between the order statistics one
  binomial standard deviation either side of its rank (interpolated;
  distribution-free), times
  the square root of the design effect where values come in groups (ITL: a
  request's gaps);
* a rate (a mean per second): the per-second series' standard deviation over the
  square root of its length, relative to its mean;
* a share: the binomial standard error, in the share's own units.
"""

from __future__ import annotations

import math

import numpy as np

from llmload.reports.gate.metrics import LATENCY, RATE, MetricSpec
from llmload.reports.gate.sides import ALL, RecordsSide

#: fewer values than this and a phase's sampling error is not estimated
MIN_VALUES = 20


def sampling_error(side: RecordsSide, spec: MetricSpec, mode: str) -> float | None:
    """One standard error of the side's statistic for ``spec`` (``run_value``'s) on the
    check's scale (log; a share: its fraction); None where it cannot be told."""
    kind, name = spec.metric.kind, spec.metric.name
    if kind == LATENCY:
        got = side.latency(name, mode, ALL)
        if got is None or got.n < MIN_VALUES:
            return None
        q = float(spec.percentile or 95.0)
        effect = got.design_effect(q) or 1.0
        return quantile_error(got.values, q / 100.0) * math.sqrt(max(effect, 1.0))
    if kind == RATE:
        series = side.rates(name, mode, ALL)
        if not series or len(series) < 2:
            return None
        x = np.asarray(series, float)
        mean = float(x.mean())
        return None if mean <= 0 else float(x.std(ddof=1)) / math.sqrt(len(x)) / mean
    counts = side.outcomes(mode, ALL)
    if counts is None:
        return None
    n, bad = counts
    p = (bad + 0.5) / (n + 1.0)  # never exactly 0: a clean phase still has an error
    return math.sqrt(p * (1.0 - p) / n)


def quantile_error(values: np.ndarray, p: float) -> float:
    """The log-scale standard error of the ``p`` quantile of ``values`` (all positive):
    half the log distance between the sample's quantiles at ``p ± sqrt(p (1 - p) / n)``
    (the order statistics one binomial standard deviation either side, interpolated)."""
    v = np.asarray(values, float)
    half = math.sqrt(p * (1.0 - p) / len(v))
    lo, hi = np.quantile(v, [max(0.0, p - half), min(1.0, p + half)])
    if lo <= 0:
        return 0.0
    return (math.log(hi) - math.log(lo)) / 2.0
