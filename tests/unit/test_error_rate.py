"""--max-error-rate: which runs breach it (pure, on per-phase counts)."""

from __future__ import annotations

import pytest

from llmload.loadtests.durations import parse_fraction
from llmload.loadtests.options import build_options
from llmload.loadtests.run.status import PhaseTally, error_rate_breach


def phase(name: str, requests: int, **errors: int) -> PhaseTally:
    p = PhaseTally(name, "stream", 10.0)
    p.requests, p.errors = requests, dict(errors)
    return p


def test_default_breaches_only_when_every_measured_request_failed() -> None:
    assert error_rate_breach([phase("stream", 10, http_4xx=9)], None) is None
    why = error_rate_breach([phase("stream", 10, http_4xx=7, connect=3)], None)
    assert why is not None and "every measured request failed (10: http_4xx 7, connect 3)" in why
    # warm-up failures (a cold start) do not count; an empty run is not a breach here
    assert error_rate_breach([phase("warmup", 5, timeout=5), phase("stream", 4)], None) is None
    assert error_rate_breach([phase("warmup", 5, timeout=5)], None) is None


def test_threshold_is_a_share_of_all_measured_phases() -> None:
    phases = [phase("sync", 50, http_5xx=2), phase("stream", 50, http_5xx=3)]
    assert error_rate_breach(phases, 0.05) is None  # 5 of 100 is not more than 5%
    why = error_rate_breach(phases, 0.04)
    assert why is not None
    assert "5 of 100 measured requests failed (5.0% > --max-error-rate 4.0%" in why
    assert error_rate_breach([phase("stream", 3, stall=3)], 1.0) is None


@pytest.mark.parametrize(("text", "value"), [("5%", 0.05), ("0.05", 0.05), ("100%", 1.0), (0, 0.0)])
def test_parse_fraction(text: str | int, value: float) -> None:
    assert parse_fraction(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["150%", "-1", "five", "1.5"])
def test_bad_max_error_rate_is_a_usage_error(text: str) -> None:
    with pytest.raises(ValueError, match="--max-error-rate"):
        build_options({}, {"target": "http://x", "max_error_rate": text})


def test_plan_key_and_flag() -> None:
    assert (
        build_options({"max_error_rate": "2%"}, {"target": "http://x"}).output.max_error_rate
        == 0.02
    )
    assert build_options({}, {"target": "http://x"}).output.max_error_rate is None
