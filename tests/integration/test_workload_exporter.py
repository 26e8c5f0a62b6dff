"""The exporter during real runs of the field's workloads: prefix-cache tokens and agent steps
counted as ``requests.jsonl`` has them, with bounded labels."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.loadtests import CliRun, loadtests_cmd
from tests.integration.test_exporter_run import ROOT, free_port


def run_scraped(out: Path, *args: str) -> tuple[list[dict], dict[tuple, float]]:
    """``llmload run ARGS --metrics-port P``; the records and the last /metrics it served."""
    port = free_port()
    cmd = loadtests_cmd("run", "--out", str(out), "--no-report", "--metrics-port", str(port))
    proc = subprocess.Popen(
        [*cmd, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    last = [""]

    def poll() -> None:
        while proc.poll() is None:
            with contextlib.suppress(httpx.TransportError):
                last[0] = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            time.sleep(0.3)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    output, _ = proc.communicate(timeout=120)
    watcher.join(5)
    assert proc.returncode == 0, output.decode(errors="replace")[-3000:]
    samples = {}
    for fam in text_string_to_metric_families(last[0]):
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return CliRun(0, "", "", out).records, samples


def total(samples: dict, name: str, **labels: str) -> float:
    return sum(
        v
        for (n, lab), v in samples.items()
        if n == name and all(dict(lab).get(k) == w for k, w in labels.items())
    )


@pytest.fixture(scope="module")
def server():
    from bench.procs import start_server_process

    args = ("--ttft-ms", "5", "--itl-ms", "1", "--prefill-ms-per-token", "0.05")
    with start_server_process(*args, "--prefix-cache-blocks", "10000") as proc:
        yield proc


def test_prefix_cache_tokens_are_counted_as_the_records_have_them(server, tmp_path):
    records, samples = run_scraped(
        tmp_path / "prefix",
        *("--target", server.url, "--dataset", "prefix", "--prefix-groups", "3"),
        *("--prefix-len", "200", "--suffix-len", "20", "--output-len", "4"),
        *("--users", "4", "--pacing", "0", "--duration", "3s", "--modes", "stream"),
    )
    labels = {"scenario": "prefix", "mode": "stream"}
    hits = total(samples, "llmload_prefix_cache_hits_total", **labels)
    queries = total(samples, "llmload_prefix_cache_queries_total", **labels)
    assert hits == sum(r["cached_tokens"] for r in records) > 0
    assert queries == sum(r["prompt_tokens"] for r in records)


def test_agent_steps_are_a_bounded_label(server, tmp_path):
    records, samples = run_scraped(
        tmp_path / "agent",
        *("--target", server.url, "--dataset", "agent", "--scenario", "short_qa"),
        *("--agent-steps", "3", "--tool-result-tokens", "30", "--max-tokens", "6"),
        *("--users", "3", "--pacing", "0", "--duration", "3s", "--modes", "stream"),
    )
    steps = {
        dict(lab)["step"]: v
        for (n, lab), v in samples.items()
        if n == "llmload_agent_step_ttft_seconds_count"
    }
    assert set(steps) == {"0", "1", "2"}
    for step, count in steps.items():
        assert count == sum(1 for r in records if r["step"] == int(step) and r["status"] == "ok")
