"""Judging a capacity step (reports.capacity.judge): SLOs, the binomial verdict, the answer."""

from __future__ import annotations

import math

import pytest

from llmload.reports.capacity.curve import answer_text, knee
from llmload.reports.capacity.judge import (
    Criterion,
    binomial_tail,
    explained_by_client,
    judge,
    parse_capacity_slo,
    samples_needed,
)
from tests.fixtures.reports import make_records


def test_parse_percentile_and_goodput_slos() -> None:
    assert parse_capacity_slo("ttft_p95=600ms,tpot_p99=0.05s") == [
        Criterion(0.95, {"ttft": 600.0}),
        Criterion(0.99, {"tpot": 50.0}),
    ]
    (joint,) = parse_capacity_slo("goodput=90%,ttft=600ms,tpot=50ms")
    assert joint == Criterion(0.9, {"ttft": 600.0, "tpot": 50.0})
    assert joint.spec == "goodput=90%:ttft=600ms,tpot=50ms"
    assert parse_capacity_slo("ttft=1s")[0].quantile == 0.95
    for bad in ("ttft_p95=fast", "itl_p95=5ms", "goodput=120%", "ttft_p100=1s", ""):
        with pytest.raises(ValueError):
            parse_capacity_slo(bad)


def test_binomial_tail_is_exact() -> None:
    assert binomial_tail(3, 3, 0.5, upper=True) == pytest.approx(0.125)
    assert binomial_tail(1, 3, 0.5, upper=False) == pytest.approx(0.5)
    assert binomial_tail(0, 10, 0.3, upper=True) == 1.0
    total = sum(math.comb(20, i) * 0.9**i * 0.1 ** (20 - i) for i in range(18, 21))
    assert binomial_tail(18, 20, 0.9, upper=True) == pytest.approx(total)
    # the classic: 59 samples all within bounds show a p95 at 95 % confidence, 58 do not
    assert samples_needed(0.95, 0.95) == 59
    assert binomial_tail(59, 59, 0.95, upper=True) <= 0.05 < binomial_tail(58, 58, 0.95, True)


def test_judge_pass_fail_uncertain() -> None:
    slo = [Criterion(0.95, {"ttft": 300.0})]
    fast = make_records("s1", "stream", 120, t_start=0.0, ttft_ms=200.0, jitter=0.05)
    slow = make_records("s2", "stream", 120, t_start=0.0, ttft_ms=400.0, jitter=0.05)
    few = fast[:20]
    ok = judge(fast, slo, 0.95, duration_s=10.0, open_loop=False)
    assert ok["verdict"] == "pass" and ok["ratio"] < 1 and ok["saturated"] == []
    assert ok["throughput_per_s"] == pytest.approx(12.0)
    bad = judge(slow, slo, 0.95, duration_s=10.0, open_loop=False)
    assert bad["verdict"] == "fail" and bad["ratio"] > 1
    assert bad["criteria"][0]["observed_ms"] == pytest.approx(bad["ratio"] * 300.0)
    # too few requests to show a p95 with 95 % confidence, however fast they were
    assert judge(few, slo, 0.95, duration_s=2.0, open_loop=False)["verdict"] == "uncertain"


def test_errors_count_against_the_slo_and_saturate() -> None:
    recs = make_records("s", "stream", 100, t_start=0.0, ttft_ms=100.0, error_every=5)
    point = judge(recs, [Criterion(0.95, {"ttft": 600.0})], 0.95, duration_s=5, open_loop=False)
    assert point["verdict"] == "fail" and point["error_rate"] == pytest.approx(0.2)
    assert point["saturated"] and point["saturated"][0].startswith("errors")


def test_open_loop_counts_from_the_intended_send_time() -> None:
    recs = make_records("s", "stream", 100, t_start=0.0, ttft_ms=100.0, open_loop=True)
    slo = [Criterion(0.95, {"ttft": 600.0})]
    closed = judge(recs, slo, 0.95, duration_s=5, open_loop=False)
    opened = judge(recs, slo, 0.95, duration_s=5, open_loop=True, scheduled=100)
    delays = [r.schedule_delay_s for r in recs]
    assert any(delays)
    assert opened["ttft_ms"]["p95"] > closed["ttft_ms"]["p95"]


def test_answer_text_and_knee() -> None:
    cap = {
        "unit": "req/s",
        "criteria": [{"quantile": 0.95, "bounds_ms": {"ttft": 600.0}}],
        "answer": {"lo": 7.0, "hi": 8.0, "estimate": 7.5, "reason": "converged"},
    }
    curve = [
        {
            "load": 8.0,
            "criteria": [
                {
                    "verdict": "fail",
                    "ratio": 1.52,
                    "observed_ms": 910.0,
                    "text": "p95 TTFT ≤ 600 ms",
                    "share_within": 0.8,
                }
            ],
        }
    ]
    assert answer_text(cap, curve) == (
        "sustains 7.5 req/s (between 7 and 8) at p95 TTFT ≤ 600 ms; at 8 p95 TTFT is 910 ms"
    )
    assert knee([(1, 0.1), (2, 0.12), (4, 0.15), (8, 0.4), (9, 1.2)]) == 8
    assert knee([(1, 0.1), (2, 0.2)]) is None


def test_open_loop_latency_still_climbing_is_not_sustained() -> None:
    from dataclasses import replace

    recs = make_records("s", "stream", 100, t_start=0.0, ttft_ms=100.0, jitter=0.01)
    # a queue building: each request waits 4 ms longer than the one before
    climbing = [replace(r, ttft_s=0.1 + 0.004 * i) for i, r in enumerate(recs)]
    slo = [Criterion(0.5, {"ttft": 400.0})]
    flat = judge(recs, slo, 0.9, duration_s=5, open_loop=True)
    assert flat["verdict"] == "pass" and flat["saturated"] == []
    point = judge(climbing, slo, 0.9, duration_s=5, open_loop=True)
    assert point["ratio"] < 1  # the median alone looks fine ...
    assert point["verdict"] == "fail"  # ... but the step was not steady
    assert point["saturated"] and point["saturated"][0].startswith("growing")
    assert point["beyond_slo_ms"] > 50


def test_a_starved_client_explains_only_failures_within_its_lag() -> None:
    health = {"starved": ["local"], "processes": {"local": {"lag_max_ms": 30.0}}}
    assert explained_by_client({"beyond_slo_ms": 12.0}, health)
    assert not explained_by_client({"beyond_slo_ms": 80.0}, health)
    assert not explained_by_client({"beyond_slo_ms": 12.0}, {"starved": [], "processes": {}})
