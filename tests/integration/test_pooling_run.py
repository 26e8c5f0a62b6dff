"""``llmload run --protocol openai-embeddings`` and ``rerank`` against the bundled server.

The synthetic engine holds each request ``--ttft-ms`` plus ``--prefill-ms-per-token``
for every prompt token it counts (``usage``), so each record's server time has a known
answer; the run's own files are read back, and the gate picks E2E by itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.drive import ROOT, loadtest
from tests.fixtures.loadtests import harness_slack
from tests.fixtures.server_proc import start_server_process

BASE_MS, PREFILL_MS = 20.0, 0.5
RUN = ("--users", "4", "--spawn-rate", "4", "--pacing", "0.25s", "--duration", "4s")
RUN += ("--scenario", "short_qa")
LLMLOAD = [sys.executable, "-m", "llmload"]


@pytest.fixture(scope="module")
def server():
    proc = start_server_process(
        "--ttft-ms", str(BASE_MS), "--prefill-ms-per-token", str(PREFILL_MS)
    )
    yield proc
    proc.stop()


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(("protocol", "batch"), [("openai-embeddings", 4), ("rerank", 3)])
def test_a_run_without_streams(server, protocol: str, batch: int, tmp_path: Path) -> None:
    out = tmp_path / protocol
    args = ("--target", server.url, "--protocol", protocol, "--batch-size", str(batch))
    summary = loadtest(out, *args, *RUN)
    recs = records(out)
    assert recs and all(r["status"] == "ok" and r["mode"] == "sync" for r in recs)
    assert all(r["inputs"] == batch and r["ttft_s"] is None for r in recs)
    assert all(r["prompt_tokens"] >= batch for r in recs)
    slack = harness_slack(json.loads((out / "run.json").read_text()), "sync") + 0.005
    over = []
    for r in recs:  # the server held it for its stated time, and the client saw no less
        stated = (BASE_MS + PREFILL_MS * r["prompt_tokens"]) / 1000
        held = r["server_e2e_s"] - r["server_queue_s"]
        assert held >= stated - 0.001
        over.append(held - stated)
        assert r["e2e_s"] >= r["server_e2e_s"]
    # a late wake-up of the server's own loop (a busy neighbour) makes one request run
    # over; a wrong count of the tokens it holds for would move them all
    assert sorted(over)[len(over) // 2] <= slack, over
    assert list(summary["phases"]) == ["sync"]  # no stream phase
    phase = summary["phases"]["sync"]
    pooled = phase["pooled"]
    assert pooled["requests"] == phase["ok"] and pooled["inputs_total"] == batch * phase["ok"]
    assert pooled["inputs_per_s"] > 0 and phase["ttft_ms"]["n"] == 0
    assert phase["slo_met"] == phase["ok"]  # E2E within the SLO; TTFT does not apply
    assert "no stream and no token" in (out / "summary.md").read_text()
    # the gate's default metric for such a run is E2E
    base = tmp_path / "base.json"
    subprocess.run(
        [*LLMLOAD, "report", "baseline", str(out), "--out", str(base)], check=True, cwd=ROOT
    )
    gate = subprocess.run(
        [*LLMLOAD, "report", "gate", str(out), "--baseline", str(base)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert gate.returncode in (0, 3), gate.stdout + gate.stderr  # pass, or too few samples
    checks = json.loads((out / "gate.json").read_text())["checks"]
    assert checks and all("e2e" in c["name"] for c in checks if c["name"].startswith("p"))
    # and a history of such runs is drawn on E2E, in its sync phase
    history = tmp_path / "history"
    for _ in range(2):
        subprocess.run(
            [*LLMLOAD, "report", "baseline", str(out), "--history", str(history)],
            check=True,
            cwd=ROOT,
            capture_output=True,
        )
    drawn = subprocess.run(
        [*LLMLOAD, "report", "history", str(history)], cwd=ROOT, capture_output=True, text=True
    )
    assert drawn.returncode == 0, drawn.stderr
    md = (history / "history.md").read_text()
    assert "mode sync" in md and "| e2e" in md, md[:400]


def test_asking_for_a_stream_is_refused(server, tmp_path: Path) -> None:
    cmd = [*LLMLOAD, "run", "--target", server.url, "--protocol", "openai-embeddings"]
    cmd += ["--modes", "stream", "--duration", "2s", "--out", str(tmp_path / "x")]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no stream" in done.stderr


def test_capacity_of_embeddings_is_in_inputs_per_second(tmp_path: Path) -> None:
    # 2 slots, each request 4 inputs held 20 ms + 0.5 ms a token: about 20 requests/s, 80
    # inputs/s whatever the users; latency grows with users beyond 2 (N/2 x one request)
    with start_server_process(
        "--ttft-ms", str(BASE_MS), "--prefill-ms-per-token", str(PREFILL_MS),
        "--max-concurrency", "2",
    ) as srv:  # fmt: skip
        out = tmp_path / "cap"
        cmd = [*LLMLOAD, "capacity", "--target", srv.url, "--protocol", "openai-embeddings"]
        cmd += ["--batch-size", "4", "--scenario", "short_qa", "--mode", "sync", "--users"]
        cmd += ["--sweep", "3", "--min", "2", "--max", "8", "--slo", "e2e_p95=1s"]
        cmd += ["--step-requests", "80", "--min-step", "1s", "--warmup", "1s", "--out", str(out)]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [ln for ln in done.stderr.splitlines() if ln.startswith("capacity step")]
    assert len(steps) == 3 and all("inputs/s" in ln for ln in steps)
    cap = json.loads((out / "summary.json").read_text())["capacity"]
    for p in cap["curve"]:  # each request carried 4 inputs: 4x the requests served
        assert p["inputs_per_s"] == pytest.approx(4 * p["throughput_per_s"])
        assert p["ttft_ms"].get("p50") is None and p["e2e_ms"]["p50"] > BASE_MS
    assert "inputs/s served at 8 users" in cap["text"]  # all passed: sustained the most
    section = (out / "summary.md").read_text().split("## Capacity")[1].split("\n## ")[0]
    assert "| inputs/s |" in section and "TTFT" not in section
