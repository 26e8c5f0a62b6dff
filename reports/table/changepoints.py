"""Where a metric's run-by-run series shifted: E-Divisive means, with a permutation test.

The method performance CI uses for histories of runs (Matteson & James, *JASA*
109(505), 2014; MongoDB's and DataStax's Hunter, now Apache Otava): the split
``tau`` of a series that maximises the energy divergence between its two sides,

    Q(tau) = m k / n * (2 mean|x - y| - mean|x - x'| - mean|y - y'|),

kept when a permutation test says a split that large is rare in the shuffled
series (``p <= alpha``, seeded: the same history, the same answer), then each side
split again, recursively.  Segments shorter than ``min_size`` runs are not split.
Written here (numpy only): ``apache-otava`` pins numpy 2.2 and brings BigQuery,
Postgres and Slack clients as hard dependencies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: the fewest runs either side of a change (fewer is noise, not a regime)
MIN_SIZE = 3
PERMUTATIONS = 199


@dataclass(frozen=True)
class ChangePoint:
    """A shift: ``index`` is the first run of the new segment."""

    index: int
    p_value: float
    before: float  # the segments' means either side
    after: float


def _best_split(z: np.ndarray, min_size: int) -> tuple[int, float]:
    """The split with the largest divergence: ``(index, statistic)``."""
    n = len(z)
    d = np.abs(z[:, None] - z[None, :])
    best, where = -np.inf, -1
    for tau in range(min_size, n - min_size + 1):
        m, k = tau, n - tau
        between = 2.0 * d[:tau, tau:].mean()
        left = d[:tau, :tau].sum() / (m * (m - 1)) if m > 1 else 0.0
        right = d[tau:, tau:].sum() / (k * (k - 1)) if k > 1 else 0.0
        q = m * k / n * (between - left - right)
        if q > best:
            best, where = q, tau
    return where, float(best)


def change_points(
    values: Sequence[float],
    alpha: float = 0.05,
    permutations: int = PERMUTATIONS,
    min_size: int = MIN_SIZE,
    seed: int = 0,
) -> list[ChangePoint]:
    """Every significant shift in ``values``, in order."""
    z = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    found: list[ChangePoint] = []
    todo = [(0, len(z))]
    while todo:
        lo, hi = todo.pop()
        seg = z[lo:hi]
        if len(seg) < 2 * min_size:
            continue
        tau, q = _best_split(seg, min_size)
        beaten = sum(
            _best_split(rng.permutation(seg), min_size)[1] >= q for _ in range(permutations)
        )
        p = (beaten + 1) / (permutations + 1)
        if p > alpha:
            continue
        found.append(ChangePoint(lo + tau, p, float(seg[:tau].mean()), float(seg[tau:].mean())))
        todo += [(lo, lo + tau), (lo + tau, hi)]
    return sorted(found, key=lambda c: c.index)
