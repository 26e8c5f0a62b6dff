"""Holm–Bonferroni: several tests, one family-wise error rate.

Gating five metrics at a 5 % false-alarm rate each would raise a false alarm in
up to 23 % of good builds.  Holm's step-down procedure (S. Holm, "A simple
sequentially rejective multiple test procedure", Scandinavian Journal of
Statistics 6(2), 1979) keeps the chance of *any* false alarm in the family at
``alpha`` whatever the tests' dependence, and rejects at least as much as
Bonferroni: sort the ``m`` p-values, reject the ``k``-th smallest while
``p_(k) <= alpha / (m - k + 1)``, stop at the first that is not.
"""

from __future__ import annotations

from collections.abc import Sequence


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values in the input order: reject test ``i`` iff ``adjusted[i] <= alpha``.

    ``adjusted_(k) = max_{j <= k} min(1, (m - j + 1) p_(j))`` over the sorted p-values.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def bonferroni_level(alpha: float, m: int) -> float:
    """Each test's level when ``m`` one-sided bounds must hold together (Bonferroni)."""
    return alpha / max(m, 1)
