"""One latency bucket grid for client and server, fine enough for ``histogram_quantile`` (±5 %)."""

from __future__ import annotations

import bisect
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from llmload.common.buckets import FINE_RANGE_S, LATENCY_BUCKETS, log_bounds
from llmload.exporter import LiveMetrics
from llmload.loadtests.measure.record import RequestRecord
from llmload.target_server.metrics import ServerMetrics

EP = "/v1/chat/completions"


def histogram_quantile(q: float, values: list[float], bounds: tuple[float, ...]) -> float:
    """Prometheus's classic ``histogram_quantile`` over the cumulative counts of ``values``."""
    counts = np.cumsum(
        np.bincount([bisect.bisect_left(bounds, v) for v in values], minlength=len(bounds) + 1)
    )
    rank = q * counts[-1]
    i = int(np.searchsorted(counts, rank))  # the first bucket whose cumulative count >= rank
    lo, hi = (bounds[i - 1] if i else 0.0), bounds[i]
    below = counts[i - 1] if i else 0
    return float(lo + (hi - lo) * (rank - below) / (counts[i] - below))


def test_the_grid_is_increasing_short_and_spans_a_tenth_of_a_ms_to_ten_minutes() -> None:
    assert list(LATENCY_BUCKETS) == sorted(set(LATENCY_BUCKETS))
    assert LATENCY_BUCKETS[0] == 0.0001 and LATENCY_BUCKETS[-1] >= 600
    assert all(len(f"{b:.2e}") == 8 and float(f"{b:.2e}") == b for b in LATENCY_BUCKETS)
    for decade in (0.001, 0.01, 0.1, 1.0, 10.0):  # SLO-friendly round bounds are on the grid
        assert decade in LATENCY_BUCKETS
    # the widest upper / lower bucket ratio in the fine range: 1 + the worst error
    inside = [b for b in LATENCY_BUCKETS if FINE_RANGE_S[0] <= b <= FINE_RANGE_S[1]]
    assert max(b / a for a, b in zip(inside, inside[1:], strict=False)) <= 1.05
    assert FINE_RANGE_S[0] <= 0.02 and FINE_RANGE_S[1] >= 10.0
    assert log_bounds(1.0, 10.0, 4) == (1.0, 1.78, 3.16, 5.62, 10.0)


def test_client_and_server_histograms_share_the_grid() -> None:
    client = LiveMetrics()
    client.on_request_start("stream", "chat", EP)
    client.on_record(
        RequestRecord(
            request_id="1",
            phase="main",
            scenario="chat",
            mode="stream",
            endpoint=EP,
            started_at=0.0,
            status="ok",
            ttft_s=0.1,
            e2e_s=0.2,
            tpot_s=0.01,
            itl_s=[0.01],
            output_tokens=2,
            session_id="s",  # an agent session's step: its histogram is on the grid too
            step=0,
        )
    )
    server = ServerMetrics(dict)
    for h in server.labels(EP, True):
        h.observe(0.1)

    def bounds(registry) -> dict[str, list[str]]:
        return {
            f.name.split("_", 1)[1]: [s.labels["le"] for s in f.samples if "le" in s.labels]
            for f in registry.collect()
            if f.type == "histogram"
            and not f.name.endswith(("_schedule_delay_seconds", "_tokens_per_second"))
        }

    ours, theirs = bounds(client.registry), bounds(server.registry)
    shared = {
        "time_to_first_token_seconds",
        "inter_token_latency_seconds",
        "e2e_request_latency_seconds",
    }
    assert shared <= ours.keys() & theirs.keys()
    grid = ours["time_to_first_token_seconds"]
    assert len(grid) == len(LATENCY_BUCKETS) + 1  # and +Inf
    assert all(le == grid for le in [*ours.values(), *theirs.values()])
    assert "_created" not in generate_latest(server.registry).decode()
    server.requests.labels(EP, "true", "ok").inc()
    assert parsed(server.render().decode()) == parsed(generate_latest(server.registry).decode())


def parsed(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


@settings(max_examples=120, deadline=None)
@given(
    center=st.floats(0.02, 10.0),
    spread=st.sampled_from([0.0, 0.001, 0.01, 0.1, 0.5]),
    n=st.integers(200, 1000),
    seed=st.integers(0, 2**32 - 1),
)
def test_histogram_quantile_is_within_5_percent_from_20ms_to_10s(
    center: float, spread: float, n: int, seed: int
) -> None:
    # tight clusters are the worst case for linear interpolation inside one bucket
    rng = np.random.default_rng(seed)
    values = center * np.exp(rng.normal(0.0, spread, n))
    values = values[(values >= 0.02) & (values <= 10.0)].tolist()
    if len(values) < 100:
        return
    for q in (0.5, 0.9, 0.95, 0.99):
        exact = float(np.percentile(values, 100 * q, method="inverted_cdf"))
        estimate = histogram_quantile(q, values, LATENCY_BUCKETS)
        assert math.isclose(estimate, exact, rel_tol=0.05), (q, estimate, exact)
