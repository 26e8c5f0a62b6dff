"""What a check's sample can resolve: the smallest change it would fail (``fails from``).

A percentile's bootstrap is scale-equivariant (the same seed draws the same order
statistics), so a run whose every value is the same run's times ``k`` has its whole
bootstrap distribution times ``k``: at ``k = resolves / change`` the bound lands on the
limit exactly — a shade above fails, a shade below passes.
"""

from __future__ import annotations

import numpy as np
import pytest

from llmload.reports.gate.bootstrap import Comparison, Side, compare
from llmload.reports.gate.metrics import parse_metrics

ALPHA = 0.05


def latency_pair(k: float = 1.0) -> Comparison:
    rng = np.random.default_rng(21)
    base, run = rng.lognormal(5.0, 0.4, 3000), rng.lognormal(5.0, 0.4, 3000)
    spec = parse_metrics("ttft", 95.0, 0.10, False)[0]
    return compare(spec, "stream", "all", Side.of(base), Side.of(run * k), 2000, 7)


def test_a_run_just_past_what_the_sample_resolves_fails_and_just_short_passes() -> None:
    same = latency_pair()
    k = same.resolves(ALPHA) / same.change
    assert k > 1.0
    at = latency_pair(k)
    assert at.bounds(ALPHA)[0] == pytest.approx(at.limit, rel=1e-9)
    assert latency_pair(k * 1.01).p_value() <= ALPHA < latency_pair(k * 0.99).p_value()


def test_a_drop_is_resolved_downwards() -> None:
    spec = parse_metrics("throughput")[0]
    boots = np.linspace(0.96, 1.04, 2001)  # ±4 % around no change
    c = Comparison(spec, "stream", "all", 100.0, 100.0, 1.0, boots, 60, 60)
    _, hi = c.bounds(ALPHA)
    assert c.resolves(ALPHA) == pytest.approx(0.9 / hi)  # a drop of about 13.5 %
    assert c.pct(c.resolves(ALPHA)) < -10


def test_a_share_is_resolved_by_a_shift_in_points() -> None:
    spec = parse_metrics("error-rate")[0]
    assert spec.allowed == 0.01
    boots = np.linspace(-0.02, 0.02, 2001)
    c = Comparison(spec, "stream", "all", 0.01, 0.01, 0.0, boots, 500, 500)
    lo, _ = c.bounds(ALPHA)
    assert c.resolves(ALPHA) == pytest.approx(0.01 - lo)  # 1 point beyond the lower bound
