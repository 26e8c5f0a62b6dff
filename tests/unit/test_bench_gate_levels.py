"""The benches behind the gate's figures: which server each level is, where a series settles."""

from __future__ import annotations

import pytest

from bench.gate_accuracy import BASE, REGRESSED
from bench.steady import settles_at


def test_each_level_makes_one_metric_worse() -> None:
    assert BASE.server() == (200.0, 1.0)
    by_name = {lv.name: lv.server() for lv in REGRESSED}
    assert by_name["TTFT +20%"] == pytest.approx((240.0, 1.0))
    assert by_name["ITL +20%"] == pytest.approx((200.0, 1.2))
    # the whole answer stretched 1/0.8: 8 back-to-back users get 20 % fewer tokens/s
    assert by_name["throughput −20%"] == pytest.approx((250.0, 1.25))


def test_a_series_settles_after_its_transient() -> None:
    ramp = [(s, 100.0 + 50.0 * s) for s in range(10)]
    flat = [(s, 600.0 + (7.0 if s % 2 else -7.0)) for s in range(10, 40)]
    assert 6 <= settles_at(ramp + flat, 0.15) <= 10
    # a swing above the band later on is the steady state's noise, not the transient
    bumpy = ramp + flat[:10] + [(s, 900.0) for s in range(20, 25)] + flat[15:]
    assert 6 <= settles_at(bumpy, 0.15) <= 10
    cold = [(s, 2000.0 - 150.0 * s) for s in range(10)] + flat  # starts slow, settles
    assert 6 <= settles_at(cold, 0.15) <= 10
    assert settles_at([(s, 300.0) for s in range(20)], 0.15) == 0
