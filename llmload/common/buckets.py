"""The one histogram bucket grid for latencies, client (``llmload_*``) and server (``llmserve_*``).

``histogram_quantile`` interpolates linearly inside the bucket that holds the
quantile, so its answer can be off by up to the bucket's width: with bounds
``a < b`` the relative error is at most ``b / a - 1``.  ``LATENCY_BUCKETS`` keeps
that ratio under 5 % from 1 ms to 10 s (``FINE_PER_DECADE`` log-spaced bounds
per decade, rounded to 3 significant digits), then goes on coarsely (10 per
decade, ±26 %) to ten minutes, so minute-long requests still land in a bucket.
Client and server use these same bounds, so a dashboard may subtract one
side's quantile from the other's.  The exporter imports this module, never
the other way round: it depends on nothing but the standard library.

Why not finer, or native histograms: Prometheus native histograms would give
~4 % resolution with a handful of populated buckets, but client_python cannot
expose them; each classic bound is a series per label set (see docs/metrics.md
for the series count).
"""

from __future__ import annotations

import math

#: log-spaced bounds per decade in the fine range (max ratio after rounding: 1.0484)
FINE_PER_DECADE = 53
#: log-spaced bounds per decade below and above the fine range
COARSE_PER_DECADE = 10
#: the fine range, seconds: ``histogram_quantile`` is within 5 % of the exact percentile here
FINE_RANGE_S = (0.001, 10.0)
#: the whole grid, seconds: 0.1 ms (loopback inter-token gaps) to ten minutes
RANGE_S = (0.0001, 600.0)


def log_bounds(lo: float, hi: float, per_decade: int) -> tuple[float, ...]:
    """Bounds ``10**(k / per_decade)`` from ``lo`` up to the first one at or above ``hi``.

    Rounded to 3 significant digits (short ``le`` labels); decades are exact.
    """
    first = math.ceil(round(math.log10(lo) * per_decade, 6))
    last = math.ceil(round(math.log10(hi) * per_decade, 6))
    return tuple(float(f"{10 ** (k / per_decade):.2e}") for k in range(first, last + 1))


def latency_bounds() -> tuple[float, ...]:
    """Coarse below ``FINE_RANGE_S``, fine inside it, coarse above, to ``RANGE_S``."""
    lo, hi = FINE_RANGE_S
    below = log_bounds(RANGE_S[0], lo, COARSE_PER_DECADE)[:-1]
    above = log_bounds(hi, RANGE_S[1], COARSE_PER_DECADE)[1:]
    return (*below, *log_bounds(lo, hi, FINE_PER_DECADE), *above)


#: TTFT, ITL, TPOT, e2e and queue time, on both sides (241 bounds)
LATENCY_BUCKETS: tuple[float, ...] = latency_bounds()
