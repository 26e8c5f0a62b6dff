"""LiveMetrics as a record sink: values read back with ``registry.get_sample_value``."""

from __future__ import annotations

import math

import pytest

from exporter import LiveMetrics
from exporter.buckets import E2E_BUCKETS, ITL_BUCKETS, SCHEDULE_DELAY_BUCKETS, TTFT_BUCKETS
from exporter.live import LAG_WINDOW_S
from loadtests.record import STATUSES, RequestRecord
from loadtests.sinks import HarnessHealth, RecordSink

EP = "/v1/chat/completions"
LAB = {"mode": "stream", "scenario": "chat", "endpoint": EP}


def rec(n: int = 0, **kw: object) -> RequestRecord:
    base: dict[str, object] = dict(
        request_id=f"r{n}", phase="main", scenario="chat", mode="stream", endpoint=EP,
        started_at=1_700_000_000.0 + n, status="ok", ttft_s=0.2, e2e_s=1.0, tpot_s=0.02,
        itl_s=[0.01, 0.02, 0.03], output_tokens=4,
    )  # fmt: skip
    base.update(kw)
    return RequestRecord(**base)  # type: ignore[arg-type]


def run(m: LiveMetrics, *records: RequestRecord) -> None:
    for r in records:
        m.on_request_start(r.mode, r.scenario, r.endpoint)
    for r in records:
        m.on_record(r)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def value(m: LiveMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_is_a_record_sink_with_its_own_registry() -> None:
    a, b = LiveMetrics(), LiveMetrics()
    assert isinstance(a, RecordSink)
    assert a.registry is not b.registry
    run(a, rec())
    assert value(b, "llmload_requests_total", **LAB, status="ok") is None


def test_counts_requests_by_status_and_tokens() -> None:
    m = LiveMetrics()
    run(m, rec(0), rec(1), rec(2, status="http_5xx", ttft_s=None, e2e_s=0.1, output_tokens=0))
    run(m, rec(3, status="stall", output_tokens=2))
    assert value(m, "llmload_requests_total", **LAB, status="ok") == 2
    assert value(m, "llmload_requests_total", **LAB, status="http_5xx") == 1
    assert value(m, "llmload_requests_total", **LAB, status="stall") == 1
    # tokens the client received, failed partial streams included
    assert value(m, "llmload_output_tokens_total", **LAB) == 4 + 4 + 2
    assert value(m, "llmload_requests_in_flight", **LAB) == 0


def test_histograms_take_ok_requests_only() -> None:
    m = LiveMetrics()
    run(m, rec(0, ttft_s=0.2), rec(1, ttft_s=0.4), rec(2, status="stall", ttft_s=9.0, e2e_s=30.0))
    assert value(m, "llmload_time_to_first_token_seconds_count", **LAB) == 2
    assert value(m, "llmload_time_to_first_token_seconds_sum", **LAB) == pytest.approx(0.6)
    assert value(m, "llmload_time_to_first_token_seconds_bucket", **LAB, le="0.2") == 1
    assert value(m, "llmload_time_to_first_token_seconds_bucket", **LAB, le="0.3") == 1
    assert value(m, "llmload_time_to_first_token_seconds_bucket", **LAB, le="0.4") == 2
    assert value(m, "llmload_e2e_request_latency_seconds_count", **LAB) == 2
    assert value(m, "llmload_e2e_request_latency_seconds_bucket", **LAB, le="20.0") == 2
    assert value(m, "llmload_time_per_output_token_seconds_count", **LAB) == 2


def test_itl_observes_every_gap() -> None:
    m = LiveMetrics()
    run(m, rec(0, itl_s=[0.0004, 0.001, 0.004]), rec(1, itl_s=[]))
    assert value(m, "llmload_inter_token_latency_seconds_count", **LAB) == 3
    assert value(m, "llmload_inter_token_latency_seconds_bucket", **LAB, le="0.0005") == 1
    assert value(m, "llmload_inter_token_latency_seconds_bucket", **LAB, le="0.001") == 2
    assert value(m, "llmload_inter_token_latency_seconds_bucket", **LAB, le="0.003") == 2
    assert value(m, "llmload_inter_token_latency_seconds_bucket", **LAB, le="0.005") == 3
    assert value(m, "llmload_inter_token_latency_seconds_sum", **LAB) == pytest.approx(0.0054)


def test_warmup_is_counted_but_kept_out_of_latencies() -> None:
    m = LiveMetrics()
    run(m, rec(0, warmup=True, ttft_s=5.0, schedule_delay_s=0.3), rec(1))
    assert value(m, "llmload_requests_total", **LAB, status="ok") == 2
    assert value(m, "llmload_output_tokens_total", **LAB) == 8
    assert value(m, "llmload_time_to_first_token_seconds_count", **LAB) == 1
    assert value(m, "llmload_time_to_first_token_seconds_sum", **LAB) == pytest.approx(0.2)
    assert value(m, "llmload_schedule_delay_seconds_count", **LAB) == 0


def test_schedule_delay_takes_every_status() -> None:
    m = LiveMetrics()
    run(m, rec(0, schedule_delay_s=0.002), rec(1, status="timeout", schedule_delay_s=0.5))
    run(m, rec(2, schedule_delay_s=-1e-6), rec(3))  # clock jitter below zero reads as 0
    assert value(m, "llmload_schedule_delay_seconds_count", **LAB) == 3
    assert value(m, "llmload_schedule_delay_seconds_bucket", **LAB, le="0.0001") == 1
    assert value(m, "llmload_schedule_delay_seconds_bucket", **LAB, le="0.0025") == 2
    assert value(m, "llmload_schedule_delay_seconds_bucket", **LAB, le="0.5") == 3


def test_labels_separate_modes_scenarios_endpoints() -> None:
    m = LiveMetrics()
    run(
        m,
        rec(0),
        rec(1, mode="sync", ttft_s=1.0),
        rec(2, scenario="rag", endpoint="/v1/completions"),
    )
    assert value(m, "llmload_requests_total", **LAB, status="ok") == 1
    sync = {**LAB, "mode": "sync"}
    assert value(m, "llmload_time_to_first_token_seconds_sum", **sync) == pytest.approx(1.0)
    rag = {"mode": "stream", "scenario": "rag", "endpoint": "/v1/completions"}
    assert value(m, "llmload_requests_total", **rag, status="ok") == 1


def test_only_the_four_allowed_labels_appear() -> None:
    m = LiveMetrics()
    run(m, rec(0), rec(1, status="connect"))
    m.on_users(3)
    m.on_health("local", HarnessHealth(10.0, 0.001, 2))
    names = set()
    for family in m.registry.collect():
        assert family.name.startswith("llmload_")
        for sample in family.samples:
            names.add(sample.name)
            assert set(sample.labels) - {"le"} <= {"mode", "scenario", "endpoint", "status"}
    assert "llmload_requests_total" in names and "llmload_active_users" in names


def test_first_request_start_creates_zeroed_series() -> None:
    m = LiveMetrics()
    m.on_request_start("stream", "chat", EP)
    # a scrape now sees zeros, so rate() over the run misses no later observation
    assert value(m, "llmload_requests_total", **LAB, status="ok") == 0
    assert value(m, "llmload_time_to_first_token_seconds_count", **LAB) == 0
    assert value(m, "llmload_requests_in_flight", **LAB) == 1


def test_in_flight_follows_starts_and_records() -> None:
    m = LiveMetrics()
    for _ in range(5):
        m.on_request_start("stream", "chat", EP)
    m.on_record(rec(0))
    m.on_record(rec(1, status="disconnect"))
    assert value(m, "llmload_requests_in_flight", **LAB) == 3


def test_active_users_gauge() -> None:
    m = LiveMetrics()
    m.on_users(20)
    assert value(m, "llmload_active_users") == 20
    m.on_users(0)
    assert value(m, "llmload_active_users") == 0


def test_health_exports_the_busiest_fresh_process() -> None:
    clock = FakeClock()
    m = LiveMetrics(clock=clock, health_ttl_s=10.0)
    assert value(m, "llmload_client_cpu_percent") == 0
    m.on_health("worker-a", HarnessHealth(cpu_percent=35.0, loop_lag_s=0.020, inflight=4))
    m.on_health("worker-b", HarnessHealth(cpu_percent=92.0, loop_lag_s=0.004, inflight=9))
    assert value(m, "llmload_client_cpu_percent") == 92.0
    assert value(m, "llmload_event_loop_lag_seconds") == pytest.approx(0.020)
    assert value(m, "llmload_harness_processes") == 2
    clock.now += 6
    m.on_health("worker-a", HarnessHealth(cpu_percent=40.0, loop_lag_s=0.001, inflight=1))
    clock.now += 4.5  # worker-b silent for 10.5 s: it no longer counts
    assert value(m, "llmload_client_cpu_percent") == 40.0
    assert value(m, "llmload_event_loop_lag_seconds") == pytest.approx(0.001)
    assert value(m, "llmload_harness_processes") == 1


def test_loop_lag_keeps_a_stall_visible_for_the_window() -> None:
    clock = FakeClock()
    m = LiveMetrics(clock=clock)
    m.on_health("local", HarnessHealth(cpu_percent=50.0, loop_lag_s=0.300, inflight=1))
    clock.now += 1
    m.on_health("local", HarnessHealth(cpu_percent=20.0, loop_lag_s=0.002, inflight=1))
    # the newer calm snapshot does not hide a stall a scrape may not have seen yet
    assert value(m, "llmload_event_loop_lag_seconds") == pytest.approx(0.300)
    assert value(m, "llmload_client_cpu_percent") == 20.0
    clock.now += LAG_WINDOW_S
    assert value(m, "llmload_event_loop_lag_seconds") == pytest.approx(0.002)


def test_phase_events_add_no_series() -> None:
    m = LiveMetrics()
    before = sorted(f.name for f in m.registry.collect())
    m.on_phase("main", "stream", "start", 1.0)
    assert sorted(f.name for f in m.registry.collect()) == before


def test_close_without_start_is_harmless_and_idempotent() -> None:
    m = LiveMetrics()
    m.close()
    m.stop()
    assert m.scrapes == 0


@pytest.mark.parametrize(
    ("buckets", "lo", "hi"),
    [(TTFT_BUCKETS, 0.001, 60), (ITL_BUCKETS, 0.0005, 5), (E2E_BUCKETS, 0.01, 600),
     (SCHEDULE_DELAY_BUCKETS, 0.0001, 30)],
)  # fmt: skip
def test_buckets_sorted_and_span_the_documented_range(
    buckets: tuple[float, ...], lo: float, hi: float
) -> None:
    assert list(buckets) == sorted(set(buckets))
    assert buckets[0] == lo and buckets[-1] == hi
    assert all(math.isfinite(b) and b > 0 for b in buckets)


def test_every_status_class_is_accepted() -> None:
    m = LiveMetrics()
    run(m, *(rec(i, status=s) for i, s in enumerate(STATUSES)))
    total = sum(value(m, "llmload_requests_total", **LAB, status=s) or 0 for s in STATUSES)
    assert total == len(STATUSES)
