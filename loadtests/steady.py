"""Where a series settles: the MSER-5 truncation rule, on any sequence of observations.

MSER (the Marginal Standard Error Rule; K. P. White Jr., "An effective truncation
heuristic for bias reduction in simulation output", Simulation 69(6), 1997) drops
the first ``d`` observations where the remaining ones' squared standard error of
the mean, ``Σ (Y_i − Ȳ_d)² / (n − d)²``, is smallest: the start-up transient both
biases the mean and widens it, and dropping it narrows the error until dropping
more only costs samples.  MSER-5 (S. C. Spratt, 1998; compared in K. P. White,
M. J. Cobb, S. C. Spratt, "A comparison of five steady-state truncation
heuristics for simulation", Winter Simulation Conference 2000) applies it to the
means of consecutive batches of five, which smooths the noise that would
otherwise steer it; Hoad, Robinson and Davies ("Automated selection of the
number of replications and warm-up length", JORS 61(11), 2010) found it the most
reliable of the automatic rules they tested.  As usual, ``d`` is searched in the
first half of the series only, keeping at least two batches (near the end the rule
is unstable, and with one batch left its statistic is 0 whatever the data).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

BATCH = 5


def mser(series: Sequence[float], batch: int = BATCH) -> int:
    """How many leading observations to drop (a multiple of ``batch``; 0 for a short series)."""
    k = len(series) // batch
    if k < 2:
        return 0
    means = [math.fsum(series[i * batch : (i + 1) * batch]) / batch for i in range(k)]
    best_d, best = 0, math.inf
    for d in range((k - 1) // 2 + 1):  # the first half, at least two batches kept
        rest = means[d:]
        n = len(rest)
        mean = math.fsum(rest) / n
        stat = math.fsum((y - mean) ** 2 for y in rest) / (n * n)
        if stat < best:
            best_d, best = d, stat
    return best_d * batch
