"""Statistics against hand-computed values (and numpy's default method as a cross-check)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.draw.charts import nice_ticks
from llmload.reports.table import timeseries
from llmload.reports.table.schema import MetricStats
from llmload.reports.table.stats import bin_width, ecdf_points, histogram, percentile


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        ([1, 2, 3, 4], 50, 2.5),  # h = 1.5 -> 2 + 0.5 * (3 - 2)
        ([1, 2, 3, 4], 90, 3.7),  # h = 2.7 -> 3 + 0.7 * 1
        ([1, 2, 3, 4], 95, 3.85),  # h = 2.85
        ([1, 2, 3, 4], 99, 3.97),  # h = 2.97
        ([10, 20, 30, 40, 50], 90, 46.0),  # h = 3.6 -> 40 + 0.6 * 10
        ([10, 20, 30, 40, 50], 50, 30.0),  # exact middle rank
        ([5], 99, 5.0),  # a single value is every percentile
        ([0, 100], 95, 95.0),
        ([1, 2, 3, 4], 0, 1.0),
        ([1, 2, 3, 4], 100, 4.0),
    ],
)
def test_percentile_hand_computed(values: list[float], p: float, expected: float) -> None:
    assert percentile(values, p) == pytest.approx(expected, abs=1e-12)


def test_metric_stats_hand_computed_and_scaled() -> None:
    # seconds -> ms; None and NaN are ignored
    d = MetricStats.of([0.010, 0.020, None, 0.030, float("nan"), 0.040, 0.050], scale=1000.0)
    assert d.n == 5
    assert d.p50 == pytest.approx(30.0)
    assert d.p90 == pytest.approx(46.0)
    assert d.p95 == pytest.approx(48.0)  # h = 3.8
    assert d.p99 == pytest.approx(49.6)  # h = 3.96
    assert d.mean == pytest.approx(30.0)
    assert d.max == pytest.approx(50.0)


def test_metric_stats_empty_is_all_null() -> None:
    d = MetricStats.of([]).to_json()
    assert d == {
        "n": 0,
        "p50": None,
        "p90": None,
        "p95": None,
        "p99": None,
        "mean": None,
        "max": None,
    }


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=60),
    st.floats(0, 100),
)
def test_percentile_matches_numpy_default(values: list[float], p: float) -> None:
    ours = percentile(sorted(values), p)
    assert math.isclose(ours, float(np.percentile(values, p)), rel_tol=1e-9, abs_tol=1e-6)


def test_ecdf_points_exact_and_downsampled() -> None:
    assert ecdf_points([3.0, 1.0, 2.0]) == [(1.0, 1 / 3), (2.0, 2 / 3), (3.0, 1.0)]
    pts = ecdf_points([float(i) for i in range(10_000)], max_points=200)
    assert len(pts) <= 200
    assert pts[0] == (0.0, 1 / 10_000) and pts[-1] == (9999.0, 1.0)
    assert all(a[0] <= b[0] and a[1] < b[1] for a, b in zip(pts, pts[1:], strict=False))


def test_histogram_counts_every_value() -> None:
    values = [1.0, 2.0, 2.0, 3.0, 4.0, 100.0]
    edges, counts = histogram(values, bins=4)
    assert sum(counts) == len(values)
    assert len(edges) == 5
    # the far tail beyond p99.5 lands in the last bin instead of stretching the axis
    assert counts[-1] >= 1
    _, flat = histogram([20.0] * 50, bins=10)
    assert sum(flat) == 50


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.none()
        | st.floats(-1e12, 1e12)
        | st.sampled_from([math.nan, math.inf, -math.inf])
        | st.integers(-(10**6), 10**6),
        max_size=60,
    ),
    st.sampled_from([1.0, 1000.0]),
)
def test_metric_stats_are_those_of_the_finite_values(values: list, scale: float) -> None:
    """The fast path (all finite, told by their sum) and the value-by-value filter agree."""
    xs = sorted(v * scale for v in values if v is not None and math.isfinite(v))
    d = MetricStats.of(values, scale)
    assert d.n == len(xs)
    if xs:
        assert (d.p50, d.max, d.mean) == (percentile(xs, 50), xs[-1], math.fsum(xs) / len(xs))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=80)
    | st.lists(st.sampled_from([0.5, 1.0, 2.5, 40.0]), min_size=1, max_size=80),
    st.sampled_from([1, 3, 40]),
)
def test_histogram_bins_as_value_by_value(values: list[float], bins: int) -> None:
    """The binary search over the sorted values counts what binning each value would."""
    edges, counts = histogram(values, bins)
    lo, width = edges[0], (edges[-1] - edges[0]) / bins
    by_value = [0] * bins
    for x in values:
        by_value[max(0, min(int((x - lo) / width), bins - 1))] += 1
    assert counts == by_value


def _ok(i: int) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}",
        phase="stream",
        scenario="s",
        mode="stream",
        endpoint="/v1/chat/completions",
        started_at=100.0 + i,
        status="ok",
        ttft_s=0.1,
        e2e_s=0.5,
    )


def test_a_scatter_keeps_every_kth_point_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timeseries, "MAX_SCATTER", 10)
    ttft = timeseries.latency_over_time([_ok(i) for i in range(1000)], 100.0)[0]
    assert ttft.name == "stream TTFT" and len(ttft.points) == 10
    assert [x for x, _ in ttft.points] == [100.0 * k for k in range(10)]
    few = timeseries.latency_over_time([_ok(i) for i in range(5)], 100.0)[0]
    assert [x for x, _ in few.points] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_bins() -> None:
    assert bin_width(30) == 1.0
    assert bin_width(3600) == 15.0
    assert 3600 / bin_width(3600) <= 240


@pytest.mark.parametrize(("lo", "hi"), [(0, 565), (0, 1), (160, 560), (0.001, 0.004), (0, 0)])
def test_nice_ticks_cover_the_range(lo: float, hi: float) -> None:
    ticks = nice_ticks(lo, hi)
    assert ticks[0] <= lo and ticks[-1] >= hi
    assert 2 <= len(ticks) <= 12
