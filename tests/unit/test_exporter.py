"""LiveMetrics as a record sink: values read back with ``registry.get_sample_value``."""

from __future__ import annotations

import bisect
import logging
import math

import pytest
from prometheus_client import generate_latest
from prometheus_client.utils import floatToGoString

from llmload.exporter import LiveMetrics
from llmload.exporter.buckets import LATENCY_BUCKETS, SCHEDULE_DELAY_BUCKETS
from llmload.exporter.live import LAG_WINDOW_S
from llmload.loadtests.measure.record import STATUSES, RequestRecord
from llmload.loadtests.run.sinks import HarnessHealth, RecordSink

EP = "/v1/chat/completions"
LAB = {"mode": "stream", "scenario": "chat", "endpoint": EP}


def rec(n: int = 0, **kw: object) -> RequestRecord:
    base: dict[str, object] = dict(
        request_id=f"r{n}",
        phase="main",
        scenario="chat",
        mode="stream",
        endpoint=EP,
        started_at=1_700_000_000.0 + n,
        status="ok",
        ttft_s=0.2,
        e2e_s=1.0,
        tpot_s=0.02,
        itl_s=[0.01, 0.02, 0.03],
        output_tokens=4,
    )
    base.update(kw)
    return RequestRecord(**base)  # type: ignore[arg-type]  # a test value outside the declared type, on purpose


def le(v: float, below: bool = False) -> str:
    """The ``le`` label of the latency bucket holding ``v`` (``below``: the one under it)."""
    i = bisect.bisect_left(LATENCY_BUCKETS, v)
    return floatToGoString(LATENCY_BUCKETS[i - 1 if below else i])


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
    assert value(m, "llmload_time_to_first_token_seconds_bucket", **LAB, le=le(0.2)) == 1
    assert value(m, "llmload_time_to_first_token_seconds_bucket", **LAB, le=le(0.4, True)) == 1
    assert value(m, "llmload_time_to_first_token_seconds_bucket", **LAB, le=le(0.4)) == 2
    assert value(m, "llmload_e2e_request_latency_seconds_count", **LAB) == 2
    assert value(m, "llmload_e2e_request_latency_seconds_bucket", **LAB, le=le(30.0)) == 2
    assert value(m, "llmload_time_per_output_token_seconds_count", **LAB) == 2


def test_itl_observes_every_gap() -> None:
    m = LiveMetrics()
    run(m, rec(0, itl_s=[0.0004, 0.001, 0.004]), rec(1, itl_s=[]))
    assert value(m, "llmload_inter_token_latency_seconds_count", **LAB) == 3
    assert value(m, "llmload_inter_token_latency_seconds_bucket", **LAB, le=le(0.0004)) == 1
    assert value(m, "llmload_inter_token_latency_seconds_bucket", **LAB, le=le(0.001)) == 2
    assert value(m, "llmload_inter_token_latency_seconds_bucket", **LAB, le=le(0.004, True)) == 2
    assert value(m, "llmload_inter_token_latency_seconds_bucket", **LAB, le=le(0.004)) == 3
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
    m.on_health(
        "worker-b",
        HarnessHealth(cpu_percent=92.0, loop_lag_s=0.004, inflight=9, steal_percent=3.5),
    )
    assert value(m, "llmload_client_cpu_percent") == 92.0
    assert value(m, "llmload_host_cpu_steal_percent") == 3.5  # the host that met the most
    assert value(m, "llmload_event_loop_lag_seconds") == pytest.approx(0.020)
    assert value(m, "llmload_harness_processes") == 2
    clock.now += 6
    m.on_health("worker-a", HarnessHealth(cpu_percent=40.0, loop_lag_s=0.001, inflight=1))
    clock.now += 4.5  # worker-b silent for 10.5 s: it no longer counts
    assert value(m, "llmload_client_cpu_percent") == 40.0
    assert value(m, "llmload_host_cpu_steal_percent") == 0.0
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
    [(LATENCY_BUCKETS, 0.0001, 631), (SCHEDULE_DELAY_BUCKETS, 0.0001, 30)],
)
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


def test_scenarios_past_the_cap_are_exported_as_other_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    m = LiveMetrics(max_scenarios=3)
    with caplog.at_level(logging.WARNING, logger="llmload.exporter.labels"):
        for i in range(8):
            name = f"s{i}"
            m.on_request_start("stream", name, EP)
            m.on_record(rec(i, scenario=name, status="ok" if i % 2 else "timeout"))
        m.on_request_start("stream", "s1", EP)  # an admitted name stays itself
        m.on_record(rec(9, scenario="s1"))
    kept = {"s0", "s1", "s2"}
    names = {
        s.labels["scenario"]
        for f in m.registry.collect()
        for s in f.samples
        if "scenario" in s.labels
    }
    assert names == kept | {"other"}
    other = {**LAB, "scenario": "other"}
    assert value(m, "llmload_requests_total", **other, status="ok") == 3  # s3, s5, s7
    assert value(m, "llmload_requests_total", **other, status="timeout") == 2  # s4, s6
    assert value(m, "llmload_requests_in_flight", **other) == 0
    assert value(m, "llmload_time_to_first_token_seconds_count", **other) == 3
    assert value(m, "llmload_requests_total", **LAB | {"scenario": "s1"}, status="ok") == 2
    warnings = [r for r in caplog.records if "other" in r.getMessage()]
    assert len(warnings) == 1 and "'s3'" in warnings[0].getMessage()


def test_endpoints_are_capped_too() -> None:
    m = LiveMetrics(max_endpoints=1)
    run(m, rec(0), rec(1, endpoint="/gradio_api/call/chat"))
    assert value(m, "llmload_requests_total", **LAB, status="ok") == 1
    assert value(m, "llmload_requests_total", **LAB | {"endpoint": "other"}, status="ok") == 1


def test_run_info_names_the_run_without_credentials() -> None:
    m = LiveMetrics()
    assert value(m, "llmload_run_info", run="r", label="l", model="m", target_host="h") is None
    m.describe_run(
        run="20260101T000000Z-ci",
        label="ci",
        model="qwen",
        target="https://alice:s3cret@llm.example.com:8443/v1?key=abc",
    )
    labels = {
        "run": "20260101T000000Z-ci",
        "label": "ci",
        "model": "qwen",
        "target_host": "llm.example.com:8443",
    }
    assert value(m, "llmload_run_info", **labels) == 1
    text = generate_latest(m.registry).decode()
    assert "s3cret" not in text and "alice" not in text and "abc" not in text


def test_no_created_series() -> None:
    m = LiveMetrics()
    run(m, rec(0))
    m.describe_run(run="r", label="l", model="m", target="http://127.0.0.1:1")
    assert "_created" not in generate_latest(m.registry).decode()


def test_render_writes_what_generate_latest_would() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    def parsed(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
        }

    m = LiveMetrics()
    run(
        m,
        rec(0),
        rec(1, status="timeout"),
        rec(2, mode="sync", scenario='we"ird\\name\n'),
        rec(3, ttft_s=12.5, itl_s=[0.0001, 7.0], schedule_delay_s=0.02),
    )
    m.on_users(3)
    m.describe_run(run="r", label="l", model="m", target="http://h:1")
    fast, slow = m.render().decode(), generate_latest(m.registry).decode()
    assert parsed(fast) == parsed(slow)
    assert fast.count("# TYPE") == slow.count("# TYPE")
