"""Every PromQL expression in the dashboards, run against a real Prometheus holding a real run.

The bundled synthetic server and a real 20-user ``python -m llmload.loadtests run``
(sync then stream, exporter on ``--metrics-port``, ``--grafana-url`` pointed at the
Grafana stand-in) are scraped every second by the Debian ``prometheus`` binary,
which also loads ``compose/prometheus/rules``.  Grafana's template variables are
replaced as Grafana does with "All" selected (``$job`` -> ``.*``), and again with
some values picked (``$mode`` -> ``(stream)``), and
``$__rate_interval`` -> 4 s (4 x the scrape interval).

Not covered: Grafana itself (no Grafana server can run here) — how it renders the
panels and expands ``label_values(...)``; the latter is replayed with Prometheus's
series API.  The GPU row reads a fake dcgm-exporter (``tests.fixtures.gpu_exporter``: no
GPU here); the CUDA memory, AMD and vLLM panels have no data here and are allow-listed below.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmload.dashboards import llm_load, servers, validate
from llmload.dashboards.panels import CLIENT, RATE
from llmload.loadtests import gpufamilies
from llmload.target_server.serving import ThreadedServer, start_server_thread
from tests.fixtures.gpu_exporter import WATTS, FakeExporter, serve
from tests.fixtures.grafana import STANDIN_TOKEN, GrafanaStandIn
from tests.fixtures.loadtests import harness_slack
from tests.fixtures.prometheus import Prometheus

ROOT = Path(__file__).resolve().parents[2]
#: Metric prefixes whose queries may come back empty here, and why.
ALLOW_EMPTY = {
    "vllm:": "the bundled server is not vLLM",
    "sglang:": "the bundled server is not SGLang",
    "tgi_": "the bundled server is not TGI",
    "llmserve_gpu_memory_": "no CUDA device on these machines",
    "llmload_agent_step_": "the run is a mix, not agent sessions (test_workload_exporter.py)",
    **{
        f.name: "the fake GPU exporter here is dcgm-exporter's, not AMD's"
        for f in gpufamilies.AMD.families
    },
}
#: Metrics whose quantiles are NaN in a closed-loop run, and why.
NAN_OK = {"llmload_schedule_delay_seconds": "closed loop: no schedule delay is observed"}
SUBSTITUTE = {
    "$__rate_interval": "4s",
    "$job": ".*",
    "$mode": ".*",
    "$scenario": ".*",
}
USERS = 20
#: Not a divisor of the 1 s scrape interval: with 0.5 s every scrape met the users' cycle at the
#: same point, and an instant gauge (engine batch size) could read its gap at every scrape.
PACING = "0.37s"


@dataclass
class ScrapedRun:
    prom: Prometheus
    server: ThreadedServer
    grafana: GrafanaStandIn
    start: float
    end: float
    stdout: str
    run_dir: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def scraped_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScrapedRun]:
    tmp = tmp_path_factory.mktemp("promql")
    # its prefix cache on: users repeat prompts, so both sides' hit-rate series have data
    server = start_server_thread(
        ttft_ms=40, itl_ms=8, prefix_cache_blocks=4096, log_level="warning"
    )
    grafana = GrafanaStandIn()
    threading.Thread(target=grafana.serve_forever, daemon=True).start()
    port = _free_port()
    # no GPU here: a fake dcgm-exporter (two GPUs, 300 W and 200 W) fills the GPU row
    gpu = ExitStack()
    fake = gpu.enter_context(serve(FakeExporter()))
    prom = Prometheus(
        tmp / "prometheus",
        {
            "target": [server.url.removeprefix("http://")],
            "llmload": [f"127.0.0.1:{port}"],
            "gpu": [fake.url.removeprefix("http://").removesuffix("/metrics")],
        },
        scrape_interval="1s",
        rule_files=[ROOT / "compose/prometheus/rules/*.yml"],
    )
    try:
        prom.wait_scraped("target")
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRAFANA_")}
        env["GRAFANA_TOKEN"] = STANDIN_TOKEN
        start = time.time()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "llmload.loadtests",
                "run",
                "--target",
                server.url,
                "--users",
                str(USERS),
                "--spawn-rate",
                str(USERS),
                "--pacing",
                PACING,
                "--duration",
                "6s",
                "--modes",
                "sync,stream",
                "--max-tokens",
                "8",
                "--metrics-port",
                str(port),
                "--grafana-url",
                grafana.url,
                "--out",
                str(tmp / "run"),
                "--no-report",
                "--seed",
                "1",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        end = time.time()
        yield ScrapedRun(prom, server, grafana, start, end, done.stdout + done.stderr, tmp / "run")
    finally:
        prom.stop()
        gpu.close()
        server.stop()
        grafana.shutdown()
        grafana.server_close()


#: One value picked, as Grafana formats a multi-value variable for a regex matcher.
PICKED = {
    **SUBSTITUTE,
    "$mode": "(stream)",
    "$scenario": "(short_qa|code_gen)",
    "$job": "(llmload|target|gpu)",
}


def _concrete(expr: str, values: dict[str, str] = SUBSTITUTE) -> str:
    for var, value in values.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, expr
    return expr


def _values(result: list[dict]) -> list[float]:
    return [float(v) for series in result for _, v in series["values"]]


@pytest.mark.parametrize("values", [SUBSTITUTE, PICKED], ids=["all", "picked"])
def test_every_dashboard_query_returns_data(scraped_run: ScrapedRun, values: dict) -> None:
    run = scraped_run
    failures, checked, skipped = [], set(), set()
    for title, ref, expr in validate.expressions(llm_load.build()):
        names = validate.metric_names(expr)
        if names and all(any(n.startswith(p) for p in ALLOW_EMPTY) for n in names):
            skipped.add(title)
            continue
        checked.add(title)
        result = run.prom.query_range(_concrete(expr, values), run.start, run.end + 2, step=1.0)
        points = _values(result)
        nan_ok = any(n.startswith(m) for n in names for m in NAN_OK)
        if not points:
            failures.append(f"{title} [{ref}]: no series: {expr}")
        elif not nan_ok and not any(math.isfinite(v) for v in points):
            failures.append(f"{title} [{ref}]: only NaN/Inf: {expr}")
    assert failures == []
    # the allow-list stays short: only the GPU and vLLM-only panels are skipped whole
    server_rows = {
        p.build().title for s in servers.SERVERS for p in servers.row(s)
    }  # the other servers' own rows: no data from the bundled server
    assert skipped - checked == {
        "GPU memory (CUDA targets)",
        "vLLM KV-cache usage",
        "Agent sessions: TTFT by step",
        *server_rows,
    }


def test_key_panels_show_the_run(scraped_run: ScrapedRun) -> None:
    """Values, not only presence: the run's users, its requests, and client TTFT above server."""
    run, d = scraped_run, llm_load.build()
    exprs = {(t, ref): e for t, ref, e in validate.expressions(d)}
    at = run.end

    def peak(title: str, ref: str = "A") -> float:
        result = run.prom.query_range(_concrete(exprs[(title, ref)]), run.start, at, step=1.0)
        return max(v for v in _values(result) if math.isfinite(v))

    assert peak("Active users") == USERS
    assert peak("Requests/s") > 0 and peak("Output tokens/s") > 0
    assert peak("Error %") == 0
    # the synthetic engine's load gauges: streams in its batch, its process's CPU share
    assert peak("Engine batch size") >= 1
    assert 0 < peak("Engine busy") <= 1 and 0 < peak("Engine busy ratio") <= 1
    assert peak("Engine queue depth") == 0
    # the fake exporter's GPUs draw a constant 300 W and 200 W: tokens per joule is the
    # client's tokens per second over 500 W at every step
    assert peak("GPU power") == max(WATTS)
    tokens = f"sum(rate(llmload_output_tokens_total{{{CLIENT}}}[{RATE}]))"
    per_s = run.prom.query_range(_concrete(tokens), run.start, at, step=1.0)
    top = max(v for v in _values(per_s) if math.isfinite(v))
    assert peak("Output tokens per joule (GPU)") == pytest.approx(top / sum(WATTS))
    gap = run.prom.query_range(
        _concrete(exprs[("Client - server TTFT (streaming)", "A")]), run.start, at, step=1.0
    )
    finite = [v for v in _values(gap) if math.isfinite(v)]
    # client TTFT contains the server's; on loopback the rest is a few milliseconds, plus the
    # load generator's own delay on a busy machine (its worst loop lag, from run.json)
    info = json.loads((run.run_dir / "run.json").read_text())
    assert finite and 0 < statistics.median(finite) < 0.05 + harness_slack(info, "stream"), finite


def test_template_variables_find_values(scraped_run: ScrapedRun) -> None:
    prom = scraped_run.prom
    pattern = re.compile(r"label_values\((?:(.+),\s*)?(\w+)\)")
    found = {}
    for var in llm_load.build()["templating"]["list"]:
        if var["type"] != "query":
            continue
        match = pattern.fullmatch(var["definition"])
        assert match, var["definition"]
        selector, label = _concrete(match.group(1) or "up"), match.group(2)
        series = prom.api("series", **{"match[]": selector, "start": scraped_run.start})
        found[var["name"]] = {s[label] for s in series if label in s}
    assert found["job"] >= {"target", "llmload"}
    assert found["mode"] == {"sync", "stream"}
    assert found["scenario"]


def test_alert_rules_evaluate_on_real_data(scraped_run: ScrapedRun) -> None:
    prom = scraped_run.prom
    groups = prom.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == 4 and all(r["health"] == "ok" for r in rules), rules
    p95 = prom.query_range("llmload:ttft_seconds:p95_1m", scraped_run.start, scraped_run.end)
    assert {s["metric"]["mode"] for s in p95} == {"sync", "stream"}
    assert all(r.get("state") in (None, "inactive") for r in rules), "a healthy run fires nothing"


def test_the_run_annotated_its_phases(scraped_run: ScrapedRun) -> None:
    grafana = scraped_run.grafana
    assert grafana.errors == []
    calls = [(r["method"], r["path"].rsplit("/", 1)[-1].isdigit()) for r in grafana.requests]
    assert calls == [("POST", False), ("PATCH", True)] * 2
    posts = [r["body"] for r in grafana.requests if r["method"] == "POST"]
    assert [t for p in posts for t in p["tags"] if t.startswith("mode:")] == [
        "mode:sync",
        "mode:stream",
    ]
    for req in grafana.requests:
        assert req["headers"]["Authorization"] == f"Bearer {STANDIN_TOKEN}"
        body = req["body"]
        assert scraped_run.start * 1000 - 1 <= body["time"] <= scraped_run.end * 1000 + 1
    assert STANDIN_TOKEN not in scraped_run.stdout
