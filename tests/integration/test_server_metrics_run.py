"""The server on the run's timeline: ``llmload run`` scrapes the target's own ``/metrics``.

Against the bundled synthetic server with ``--max-concurrency K`` the queue time
is known from the engine's arithmetic: each request holds a slot for
``S = ttft + (tokens - 1) * itl`` (exact latencies), and with ``2K`` users starting
together the first ``K`` requests wait for nothing while every later one waits
for a whole ``S`` (the other half of the users holds the slots).  The report's
server queue time for the phase, read from ``summary.json``, must match
``S * (N - K) / N`` within 5 % (N: the phase's records).  A target without
``/metrics`` runs as before, with one line saying so.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from llmload.loadtests.percentile import percentile_of
from llmload.reports.draw.fmt import fmt_ms
from tests.fixtures.loadtests import ROOT

K, TTFT_MS, ITL_MS, TOKENS = 3, 120, 8, 21
SERVICE_S = (TTFT_MS + (TOKENS - 1) * ITL_MS) / 1000.0


def llmload_run(out: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llmload", "run", "--out", str(out), "--status-interval", "60"]
        + list(args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("workers", [0, 2], ids=["local", "workers"])
def test_server_queue_time_matches_the_engine_arithmetic(
    start_server_proc, tmp_path, workers: int
) -> None:
    """One scraper (the master's, with ``--workers``) on the records' clock, whatever the
    load generator's processes."""
    server = start_server_proc(
        "--max-concurrency", str(K), "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)
    )
    out = tmp_path / "run"
    done = llmload_run(
        out,
        *("--target", server.url, "--users", str(2 * K), "--pacing", "0s"),
        *("--spawn-rate", "100", "--first-start", "together", "--duration", "4s"),
        *("--modes", "stream", "--max-tokens", str(TOKENS), "--ignore-eos"),
        *(("--workers", str(workers)) if workers else ()),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [x for x in done.stderr.splitlines() if x.startswith("server metrics:")]
    assert len(lines) == 1 and "the bundled server's families" in lines[0], done.stderr
    records = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    n = len(records)
    assert n >= 4 * K and all(r["status"] == "ok" for r in records)
    if workers:
        assert {r["worker"] for r in records} == {"worker-0", "worker-1"}

    summary = json.loads((out / "summary.json").read_text())
    block = summary["phases"]["stream"]["server"]
    assert block["server"] == "llmserve" and block["window"]["exact"]
    queue = block["latency"]["queue"]
    assert queue["n"] == n  # the server observed every request of the phase once
    expected_ms = SERVICE_S * 1000 * (n - K) / n
    assert abs(queue["mean"] - expected_ms) <= 0.05 * expected_ms, (queue, expected_ms, n)
    # the histogram's p95 bucket holds the exact p95 of the server's own per-request queue
    # times (its x_llmload block): on a busy machine a slot is held longer than S, so the
    # check is against what this run's server measured, not against S
    true_p95 = percentile_of([1000 * r["server_queue_s"] for r in records], 95)
    p95 = queue["p95"]
    assert true_p95 is not None and p95["lo"] - 1 <= true_p95 <= p95["hi"] + 1, (p95, true_p95)
    # queue + the engine's TTFT is the server's TTFT; the path on loopback is small
    split = block["ttft_split_ms"]
    assert abs(split["server"] - (split["queue"] + TTFT_MS)) <= 0.05 * split["server"]
    assert abs(split["path"]) < 0.2 * split["client"]
    g = block["gauges"]
    assert g["running"]["max"] == K and g["waiting"]["max"] >= 1
    codes = {d["code"] for d in summary["phases"]["stream"]["diagnostics"]}
    assert "server_queue" in codes
    run_block = summary["server_metrics"]
    assert run_block["status"] == "scraping" and run_block["failed"] == 0
    assert run_block["scrapes"] >= 3

    # the file: one meta line, scrapes on the records' clock, an end line
    rows = [json.loads(x) for x in (out / "server_metrics.jsonl").read_text().splitlines()]
    assert "meta" in rows[0] and "end" in rows[-1]
    scrapes = [r for r in rows[1:-1] if "t" in r]
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["started_at"] - 5 <= scrapes[0]["t"] <= min(r["started_at"] for r in records)
    assert max(r["started_at"] for r in records) <= scrapes[-1]["t"] <= run_json["ended_at"] + 5
    marks = [m for r in scrapes for m in r.get("mark", [])]
    assert "start stream" in marks and "end stream" in marks

    html = (out / "report.html").read_text()
    assert 'id="server-side"' in html and "chart-server-running" in html
    assert f"{queue['mean']:.0f}" in html
    # summary.md and the terminal say it in words: the server, its queue, the TTFT split
    said = f"queue mean {fmt_ms(queue['mean'])} ms"
    md = (out / "summary.md").read_text()
    assert "## The server's side" in md and "stream: llmserve TTFT mean" in md and said in md
    assert "the server's side (its /metrics" in done.stdout and said in done.stdout


def _relay(upstream: str) -> FastAPI:
    """A gateway that forwards the OpenAI routes and has no /metrics (404)."""
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> Any:
        async with httpx.AsyncClient(base_url=upstream) as c:
            return JSONResponse((await c.get("/v1/models")).json())

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        client = httpx.AsyncClient(base_url=upstream, timeout=60)

        async def relay() -> Any:
            async with client, client.stream("POST", "/v1/chat/completions", json=body) as up:
                async for chunk in up.aiter_bytes():
                    yield chunk

        return StreamingResponse(relay(), media_type="text/event-stream")

    return app


@pytest.fixture()
def no_metrics_gateway(start_server: Callable[..., Any]) -> Iterator[str]:
    server = start_server(ttft_ms=30, itl_ms=5)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    proxy = uvicorn.Server(uvicorn.Config(_relay(server.url), log_level="warning"))
    thread = threading.Thread(target=proxy.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not proxy.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proxy.started
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        proxy.should_exit = True
        thread.join(10)


def test_a_target_without_metrics_runs_as_before(no_metrics_gateway: str, tmp_path) -> None:
    out = tmp_path / "run"
    done = llmload_run(
        out,
        *("--target", no_metrics_gateway, "--users", "2", "--pacing", "0.2s"),
        *("--duration", "2s", "--modes", "stream", "--max-tokens", "8"),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [x for x in done.stderr.splitlines() if "server metrics" in x]
    assert lines == [
        f"server metrics: none ({no_metrics_gateway}/metrics: it answered HTTP 404); "
        "the report shows the client's side only"
    ]
    rows = (out / "server_metrics.jsonl").read_text().splitlines()
    assert len(rows) == 1 and json.loads(rows[0])["meta"]["status"] == "absent"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["server_metrics"]["status"] == "absent"
    assert "server" not in summary["phases"]["stream"]
    assert summary["phases"]["stream"]["count"] > 0
    assert "No server metrics" in (out / "report.html").read_text()


def test_server_metrics_off_scrapes_nothing(start_server, tmp_path) -> None:
    server = start_server(ttft_ms=20, itl_ms=5)
    out = tmp_path / "run"
    done = llmload_run(
        out,
        *("--target", server.url, "--users", "1", "--duration", "1s", "--modes", "stream"),
        *("--pacing", "0s", "--max-tokens", "4", "--server-metrics", "off"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "server metrics" not in done.stderr
    assert not (out / "server_metrics.jsonl").exists()
    assert "server_metrics" not in json.loads((out / "summary.json").read_text())


def test_capacity_search_takes_the_server_queue_as_evidence(start_server_proc, tmp_path) -> None:
    """Past ``--max-concurrency`` the server queues in every scrape: the search stops there,
    saying so, although the (loose) SLO still passes."""
    server = start_server_proc("--max-concurrency", "2", "--ttft-ms", "200", "--itl-ms", "20")
    out = tmp_path / "cap"
    done = subprocess.run(
        [sys.executable, "-m", "llmload", "capacity", "--target", server.url, "--users", "2"]
        + ["--max", "8", "--slo", "ttft_p50=20s", "--step-requests", "24", "--min-step", "1s"]
        + ["--warmup", "1s", "--budget", "120s", "--max-tokens", "6", "--ignore-eos"]
        + ["--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cap = json.loads((out / "run.json").read_text())["capacity"]
    assert cap["answer"]["reason"] == "saturated", cap["steps"]
    assert [s["load"] for s in cap["steps"]] == [2, 4]
    assert "server queue: the bundled server had requests waiting" in done.stderr
    curve = json.loads((out / "summary.json").read_text())["capacity"]["curve"]
    at4 = next(p for p in curve if p["load"] == 4)
    assert any(s.startswith("server queue:") for s in at4["saturated"]), at4["saturated"]
    at2 = next(p for p in curve if p["load"] == 2)
    assert not any(s.startswith("server") for s in at2["saturated"]), at2["saturated"]


def test_compare_and_gate_show_the_server_beside_the_client(start_server_proc, tmp_path) -> None:
    server = start_server_proc("--max-concurrency", "2", "--ttft-ms", "60", "--itl-ms", "5")
    runs = []
    for users in (2, 4):  # B has twice the users: the server's queue takes the difference
        out = tmp_path / f"run{users}"
        done = llmload_run(
            out,
            *("--target", server.url, "--users", str(users), "--pacing", "0s"),
            *("--spawn-rate", "100", "--duration", "3s", "--modes", "stream"),
            *("--max-tokens", "9", "--ignore-eos"),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(out)
    cli = [sys.executable, "-m", "llmload", "report"]

    def report(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*cli, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)

    cmp = report("compare", str(runs[0]), str(runs[1]), "--out", str(tmp_path / "cmp"))
    assert cmp.returncode == 0, cmp.stderr
    row = next(x for x in cmp.stdout.splitlines() if x.startswith("| server queue mean (ms)"))
    a, b = (float(c) for c in row.split("|")[2:4])
    assert a < 10 < b and "worse" in row  # 2 users fit the 2 slots; 4 users queue
    assert "| path: client − server mean (ms)" in cmp.stdout
    base = tmp_path / "base.json"
    assert report("baseline", str(runs[0]), "--out", str(base)).returncode == 0
    assert json.loads(base.read_text())["server"]["stream"]["queue_mean_ms"] == pytest.approx(
        a, abs=0.5
    )
    gate = report("gate", str(runs[1]), "--baseline", str(base), "--min-samples", "10")
    line = next(x for x in gate.stdout.splitlines() if "server side" in x)
    assert "the bundled server's /metrics" in line and "queue mean" in line, gate.stdout
