"""A real run through the exporter, scraped every second by a real Prometheus.

``python -m llmload.loadtests run --metrics-port P`` (20 users, bundled synthetic server
in-process) and a ``--workers 2`` run; Prometheus scrapes the exporter and the
server; the test then compares what Prometheus holds with ``requests.jsonl``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from llmload.common.buckets import FINE_RANGE_S
from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.table.stats import percentile
from tests.fixtures.prometheus import Prometheus, promtool
from tests.integration.test_exporter_prometheus import bucket_of

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hostport(url: str) -> str:
    return url.split("://", 1)[1].rstrip("/")


class Run:
    """``llmload run`` in a subprocess; keeps the last /metrics text it served."""

    def __init__(self, target: str, out: Path, port: int, *extra: str) -> None:
        self.out, self.url = out, f"http://127.0.0.1:{port}/metrics"
        cmd = [
            sys.executable,
            "-m",
            "llmload.loadtests",
            "run",
            "--target",
            target,
            "--users",
            "20",
            "--spawn-rate",
            "20",
            "--pacing",
            "0.4s",
            "--modes",
            "stream",
            "--max-tokens",
            "24",
            "--metrics-port",
            str(port),
            "--out",
            str(out),
            "--no-report",
            *extra,
        ]
        self.last_metrics = ""
        self.began = time.time()
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        self._watch = threading.Thread(target=self._poll_metrics, daemon=True)
        self._watch.start()

    def _poll_metrics(self) -> None:
        while self.proc.poll() is None:
            with contextlib.suppress(httpx.TransportError):
                text = httpx.get(self.url, timeout=2).text
                if "llmload_time_to_first_token_seconds_count{" in text:
                    self.last_metrics = text
            time.sleep(0.5)

    def wait(self, timeout_s: float = 90) -> list[RequestRecord]:
        out, _ = self.proc.communicate(timeout=timeout_s)
        self.ended = time.time()
        self._watch.join(5)
        assert self.proc.returncode == 0, out.decode(errors="replace")[-3000:]
        lines = (self.out / "requests.jsonl").read_text().splitlines()
        return [RequestRecord.from_json(line) for line in lines]


def final(prom: Prometheus, expr: str, run: Run) -> float | None:
    """The expression's value at the end of the run (last point before the target went away)."""
    return prom.last_value(expr, run.began, run.ended + 1, step=0.5)


def assert_quantiles_match(
    prom: Prometheus, metric: str, job: str, exact: list[float], run: Run, qs: tuple[float, ...]
) -> None:
    """``histogram_quantile`` over the run's final buckets is within 5 % of the records' own.

    Checked where the grid promises it (``FINE_RANGE_S``); at least one quantile per metric.
    """
    values, checked = sorted(exact), []
    for q in qs:
        expr = f'histogram_quantile({q}, sum by (le) ({metric}_bucket{{job="{job}"}}))'
        got = final(prom, expr, run)
        want = percentile(values, 100 * q)
        if FINE_RANGE_S[0] <= want <= FINE_RANGE_S[1]:
            assert got is not None and abs(got - want) <= 0.05 * want, (metric, q, got, want)
            checked.append(q)
    assert checked, (metric, "no quantile in the fine range", values[:: len(values) // 10])


def settled(prom: Prometheus, job: str, run: Run, records: list[RequestRecord]) -> None:
    """Wait until Prometheus has appended the run's final scrape (slow on a busy machine)."""
    prom.wait_for(
        lambda: final(prom, f'sum(llmload_requests_total{{job="{job}"}})', run),
        lambda total: total == len(records),
        timeout_s=10,
        what=f"{job}: the final scrape",
    )


def mean_ttft(prom: Prometheus, metric: str, window: int, at: float) -> float | None:
    return prom.scalar(
        f"sum(increase({metric}_sum[{window}s])) / sum(increase({metric}_count[{window}s]))", at
    )


@pytest.mark.timeout(180)
def test_runs_seen_by_prometheus_match_the_records(
    start_server: Any, prometheus_factory: Any, tmp_path: Path
) -> None:
    server = start_server(ttft_ms=120, itl_ms=8, jitter_ms=40, fail_rate=0.05)
    local_port, dist_port = free_port(), free_port()
    prom = prometheus_factory(
        {
            "llmload": [f"127.0.0.1:{local_port}"],
            "llmload-workers": [f"127.0.0.1:{dist_port}"],
            "target": [hostport(server.url)],
        },
        scrape_interval="1s",
    )
    prom.wait_scraped("target")
    # the server's histogram children appear with their first observation, and increase()
    # leaves out what a series held at its first scrape: one streamed request, scraped,
    # before the run, so every request of the run counts in the server's mean below
    body = {
        "model": server.engine.model_name,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    httpx.post(server.url + "/v1/chat/completions", json=body, timeout=10).raise_for_status()
    prom.wait_for(
        lambda: prom.scalar('sum(llmserve_time_to_first_token_seconds_count{stream="true"})'),
        lambda got: got is not None and got >= 1,
        what="the server's TTFT series scraped",
    )

    # -- one process, 20 users; the warm-up creates the series before measuring --
    run = Run(server.url, tmp_path / "local", local_port, "--warmup", "2s", "--duration", "5s")
    records = run.wait()
    settled(prom, "llmload", run, records)
    job = '{job="llmload"}'
    assert final(prom, f"sum(llmload_requests_total{job})", run) == len(records) > 50
    errors = sum(not r.ok for r in records)
    assert errors > 0  # fail_rate 5 %: the status label is exercised
    assert final(prom, 'sum(llmload_requests_total{job="llmload",status!="ok"})', run) == errors
    tokens = sum(r.output_tokens or 0 for r in records)
    assert final(prom, f"sum(llmload_output_tokens_total{job})", run) == tokens
    gaps = sum(len(r.itl_s) for r in records if r.ok and not r.warmup)
    assert final(prom, f"sum(llmload_inter_token_latency_seconds_count{job})", run) == gaps
    assert final(prom, f"sum(llmload_requests_in_flight{job})", run) == 0

    window = int(run.ended - run.began) + 5
    q = prom.scalar(
        "histogram_quantile(0.95, sum by (le) (rate("
        f'llmload_time_to_first_token_seconds_bucket{{job="llmload"}}[{window}s])))',
        at=run.ended + 0.5,
    )
    measured = [r.ttft_s for r in records if r.ok and not r.warmup and r.ttft_s is not None]
    p95 = float(np.percentile(measured, 95, method="inverted_cdf"))
    lo, hi = bucket_of(p95)
    assert q is not None and lo < q <= hi, (q, p95)

    # Grafana's numbers are the report's: client and server quantiles off the one grid
    measured_ok = [r for r in records if r.ok and not r.warmup]
    for metric, exact, qs in (
        ("llmload_time_to_first_token_seconds", [r.ttft_s for r in measured_ok], (0.5, 0.9, 0.95)),
        ("llmload_e2e_request_latency_seconds", [r.e2e_s for r in measured_ok], (0.5, 0.9, 0.95)),
        (
            "llmload_inter_token_latency_seconds",
            [g for r in measured_ok for g in r.itl_s],
            (0.5, 0.95, 0.99),
        ),
    ):
        assert_quantiles_match(prom, metric, "llmload", exact, run, qs)  # type: ignore[arg-type]  # a test value outside the declared type, on purpose
    served = [r for r in records if r.server_ttft_s is not None]  # warm-up too: the server saw it
    assert len(served) > 50
    assert_quantiles_match(
        prom,
        "llmserve_time_to_first_token_seconds",
        "target",
        [r.server_ttft_s for r in served],
        run,
        (0.5, 0.9, 0.95),
    )
    info = prom.query_range("llmload_run_info", run.began, run.ended + 1, step=0.5)
    assert [s["metric"]["target_host"] for s in info] == [hostport(server.url)]
    assert info[0]["metric"]["run"] == "local" and info[0]["metric"]["label"] == "run"
    per_run = (
        "sum by (run) (llmload_requests_total"
        " * on (job, instance) group_left (run) llmload_run_info)"
    )
    assert final(prom, per_run, run) == len(records)  # the join docs/exporter.md shows

    client = mean_ttft(prom, "llmload_time_to_first_token_seconds", window, run.ended + 0.5)
    server_mean = mean_ttft(prom, "llmserve_time_to_first_token_seconds", window, run.ended + 0.5)
    assert client is not None and server_mean is not None
    # each mean is its records' (increase() scales a window's sum and count alike), but for
    # what a label set's series held at its first scrape: increase() starts from a series'
    # first sample (the histogram's children appear with their first record), so the
    # records observed before it are left out: a run's first few. The two means are over
    # different requests — the server's include the warm-up, whose TTFTs can be higher —
    # so they are not ordered. Per request they are: the client counts from before its
    # send, the server from its parse of the request, to the same first token, which the
    # bundled server stamps before its write: never after the client's receive stamp
    client_ttfts = [r.ttft_s for r in measured_ok if r.ttft_s is not None]
    assert client == pytest.approx(sum(client_ttfts) / len(client_ttfts), rel=1e-2)
    server_ttfts = [r.server_ttft_s for r in served]  # (x_llmload rounds them to the µs)
    assert server_mean == pytest.approx(sum(server_ttfts) / len(server_ttfts), rel=1e-3)
    assert 0.08 < server_mean and client < server_mean + 0.2, (client, server_mean)
    both = [r for r in measured_ok if r.ttft_s is not None and r.server_ttft_s is not None]
    assert both and all(r.ttft_s >= r.server_ttft_s for r in both)

    assert final(prom, f"max(llmload_client_cpu_percent{job})", run) > 0
    assert final(prom, f"max(llmload_harness_processes{job})", run) == 1
    assert final(prom, f"max(llmload_active_users{job})", run) is not None

    for text in (run.last_metrics, httpx.get(server.url + "/metrics", timeout=5).text):
        assert text
        res = promtool("check", "metrics", stdin=text)
        assert res.returncode == 0 and not (res.stdout + res.stderr).strip(), res

    # -- two locust workers: the master exports every worker's records exactly once --
    dist = Run(server.url, tmp_path / "dist", dist_port, "--workers", "2", "--duration", "4s")
    dist_records = dist.wait()
    settled(prom, "llmload-workers", dist, dist_records)
    assert len({r.worker for r in dist_records}) == 2
    workers = '{job="llmload-workers"}'
    assert final(prom, f"sum(llmload_requests_total{workers})", dist) == len(dist_records) > 30
    ok_ttft = sum(1 for r in dist_records if r.ok and r.ttft_s is not None)
    count = final(prom, f"sum(llmload_time_to_first_token_seconds_count{workers})", dist)
    assert count == ok_ttft
    # the two workers and the master, which does all the exporting, sample their health
    assert final(prom, f"max_over_time(llmload_harness_processes{workers}[10s])", dist) == 3
    assert json.loads((tmp_path / "dist/run.json").read_text())["config"]["workers"] == 2


@pytest.mark.timeout(90)
def test_pushgateway_gets_the_final_state_of_a_run(
    start_server: Any, pushgateway: Any, tmp_path: Path
) -> None:
    server = start_server(ttft_ms=20, itl_ms=5)
    cmd = [
        sys.executable,
        "-m",
        "llmload.loadtests",
        "run",
        "--target",
        server.url,
        "--users",
        "5",
        "--spawn-rate",
        "5",
        "--pacing",
        "0.2s",
        "--duration",
        "2s",
        "--modes",
        "stream",
        "--max-tokens",
        "8",
        "--pushgateway",
        pushgateway.url,
        "--out",
        str(tmp_path / "run"),
        "--no-report",
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=80)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    n = len((tmp_path / "run/requests.jsonl").read_text().splitlines())
    pushed = [
        float(line.rsplit(" ", 1)[1])
        for line in pushgateway.metrics().splitlines()
        if line.startswith("llmload_requests_total{")
    ]
    assert sum(pushed) == n > 0
