"""A/B/A/B in one run: ``llmload run --target B --baseline-target A --repeat 2`` against two
bundled synthetic servers, then ``llmload report gate RUN`` with no baseline file."""

from __future__ import annotations

import json
from pathlib import Path

from llmload.ci import SERVER_ARGS, load_command
from tests.fixtures.loadtests import llmload
from tests.fixtures.server_proc import start_server_process

STARVED = "inconclusive: the load generator"


def test_interleaved_targets_are_gated_against_each_other(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    with (
        start_server_process("--ttft-ms", "240", *SERVER_ARGS) as candidate,
        start_server_process("--ttft-ms", "200", *SERVER_ARGS) as base,
    ):
        extra = ["--duration", "6s", "--warmup", "1s", "--repeat", "2"]
        cmd = load_command(out, candidate.url, extra=[*extra, "--baseline-target", base.url])
        proc = llmload(*cmd[cmd.index("run") :])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    meta = json.loads((out / "run.json").read_text())
    order = [p["name"] for p in meta["phases"]]
    assert order == [
        "warmup",
        "baseline-warmup",
        "stream-1",
        "baseline-stream-1",
        "stream-2",
        "baseline-stream-2",
    ]
    assert meta["baseline_target"]["server"]["from"] == "/version"
    records = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert {r["phase"] for r in records} == set(order)
    summary = json.loads((out / "summary.json").read_text())
    spread = {(r["target"], r["metric"]) for r in summary["repeats"]}
    assert ("run", "TTFT p95 ms") in spread and ("baseline", "TTFT p95 ms") in spread
    assert "between-run spread (--repeat):" in proc.stdout

    gate = llmload("report", "gate", str(out), "--metric", "ttft,itl,throughput")
    assert gate.returncode == 1 or (gate.returncode == 2 and STARVED in gate.stdout), gate.stdout
    doc = json.loads((out / "gate.json").read_text())
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["itl p95 stream"]["verdict"] != "fail"
    if gate.returncode == 1:
        assert checks["ttft p95 stream"]["verdict"] == "fail"
    # both repeats of each side pooled; each repeat's value listed
    assert {s["target"] for s in doc["spread"]} == {"run", "baseline"}
    assert "(same run)" in gate.stdout
