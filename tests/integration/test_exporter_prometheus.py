"""The exporter scraped by a real Prometheus (1 s): exact totals, quantiles in the right bucket."""

from __future__ import annotations

import bisect
import random
import time
from pathlib import Path

import numpy as np

from llmload.exporter import LiveMetrics
from llmload.exporter.buckets import LATENCY_BUCKETS
from llmload.exporter.promconfig import ScrapeJob, render
from llmload.loadtests.measure.record import RequestRecord
from tests.fixtures.prometheus import promtool

ROOT = Path(__file__).resolve().parents[2]
EP = "/v1/chat/completions"


def bucket_of(value: float, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> tuple[float, float]:
    """The histogram bucket ``(lower, upper]`` that holds ``value``."""
    i = bisect.bisect_left(bounds, value)
    return (bounds[i - 1] if i else 0.0), bounds[i]


def test_promtool_accepts_the_compose_and_local_configs(tmp_path: Path) -> None:
    res = promtool("check", "config", str(ROOT / "compose/prometheus/prometheus.yml"))
    assert res.returncode == 0, res.stdout + res.stderr
    (tmp_path / "rules").mkdir()
    local = tmp_path / "prometheus.yml"
    jobs = [ScrapeJob("llmload", ["127.0.0.1:9646"]), ScrapeJob("target", ["127.0.0.1:8000"])]
    local.write_text(render(jobs, rule_files=[str(tmp_path / "rules/*.yml")]))
    res = promtool("check", "config", str(local))
    assert res.returncode == 0, res.stdout + res.stderr


def test_prometheus_sees_exact_totals_and_the_records_p95_bucket(prometheus_factory) -> None:
    m = LiveMetrics(grace_s=10.0)
    port = m.start()
    prom = prometheus_factory({"llmload": [f"127.0.0.1:{port}"]}, scrape_interval="1s")
    t_begin = time.time()
    for mode in ("stream", "sync"):
        m.on_request_start(mode, "chat", EP)  # the label sets exist (zeros) before any record
    prom.wait_for(
        lambda: prom.query("llmload_time_to_first_token_seconds_count"),
        lambda r: len(r) == 2,
        what="zeroed TTFT series scraped",
    )
    rng = random.Random(7)
    records: list[RequestRecord] = []
    statuses = ["ok"] * 18 + ["http_5xx", "timeout"]
    for batch in range(25):
        for i in range(24):
            n = batch * 24 + i
            mode = "stream" if n % 3 else "sync"
            status = rng.choice(statuses)
            r = RequestRecord(
                request_id=str(n),
                phase="main",
                scenario="chat",
                mode=mode,
                endpoint=EP,
                started_at=time.time(),
                status=status,
                ttft_s=rng.lognormvariate(-1.6, 0.5),
                e2e_s=1.0,
                itl_s=[0.01],
                output_tokens=5,
            )
            if n > 1:
                m.on_request_start(mode, "chat", EP)
            m.on_record(r)
            records.append(r)
        time.sleep(0.12)
    m.on_request_start("stream", "chat", EP)  # one still in flight at the end
    t0 = time.monotonic()
    m.stop()
    assert time.monotonic() - t0 < 5, "the final scrape should come within ~1 s"
    t_end = time.time()

    # the final scrape was answered before stop() returned; on a busy machine Prometheus
    # may take a moment longer to append its ~2,000 samples
    total = prom.wait_for(
        lambda: prom.last_value("sum(llmload_requests_total)", t_begin, t_end + 1, step=0.5),
        lambda v: v == len(records),
        timeout_s=10,
        what="the final scrape's total",
    )
    assert total == len(records)
    errors = prom.last_value(
        'sum(llmload_requests_total{status!="ok"})', t_begin, t_end + 1, step=0.5
    )
    assert errors == sum(not r.ok for r in records)
    inflight = prom.last_value("sum(llmload_requests_in_flight)", t_begin, t_end + 1, step=0.5)
    assert inflight == 1

    window = int(t_end - t_begin) + 5
    q = prom.scalar(
        "histogram_quantile(0.95, sum by (le) "
        f"(rate(llmload_time_to_first_token_seconds_bucket[{window}s])))",
        at=t_end + 0.5,
    )
    ttfts = np.array([r.ttft_s for r in records if r.ok])
    p95 = float(np.percentile(ttfts, 95, method="inverted_cdf"))
    lo, hi = bucket_of(p95)
    assert q is not None and lo < q <= hi, (q, p95, lo, hi)

    by_mode = prom.query(
        "histogram_quantile(0.95, sum by (mode, le) "
        f"(rate(llmload_time_to_first_token_seconds_bucket[{window}s])))",
        at=t_end + 0.5,
    )
    assert {s["metric"]["mode"] for s in by_mode} == {"stream", "sync"}
    for series in by_mode:
        mode_p95 = np.percentile(
            [r.ttft_s for r in records if r.ok and r.mode == series["metric"]["mode"]],
            95,
            method="inverted_cdf",
        )
        lo, hi = bucket_of(float(mode_p95))
        assert lo < float(series["value"][1]) <= hi


def test_fixture_reload_swaps_scrape_targets(prometheus_factory) -> None:
    first, second = LiveMetrics(grace_s=0.0), LiveMetrics(grace_s=0.0)
    try:
        prom = prometheus_factory({"one": [f"127.0.0.1:{first.start()}"]})
        # (target discovery applies updates every 5 s: reload at once, wait once)
        prom.reload({"two": [f"127.0.0.1:{second.start()}"]})
        prom.wait_scraped("two")
        assert {t["labels"]["job"] for t in prom.targets()} == {"two"}
        assert prom.scalar('count(up{job="two"} == 1)') == 1
    finally:
        first.stop()
        second.stop()
