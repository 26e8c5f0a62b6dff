"""``llmload run --warmup auto`` finds a transient it was given, and the gate uses the rest.

The transient: 16 closed-loop users spawned at 1.6/s against a synthetic server that runs
4 requests at a time, so TTFT climbs with the queue until the last user is in (16 / 1.6 =
10 s) and is steady after.  MSER-5 cuts in batches of five seconds: it must cut at 5, 10
or 15 s — within one batch of the ramp's end — and leave those records out.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures.loadtests import llmload
from tests.fixtures.server_proc import start_server_process

USERS, SPAWN = 16, 1.6


def test_warmup_auto_cuts_the_ramp_and_the_gate_uses_the_steady_part(tmp_path: Path) -> None:
    server_args = ("--ttft-ms", "100", "--itl-ms", "10", "--max-concurrency", "4")
    run = tmp_path / "ramp"
    with start_server_process(*server_args) as server:
        proc = llmload(
            "run", "--target", server.url, "--users", str(USERS), "--spawn-rate", str(SPAWN),
            "--pacing", "0s", "--duration", "25s", "--warmup", "auto", "--modes", "stream",
            "--scenario", "short_qa", "--max-tokens", "16", "--out", str(run),
            "--status-interval", "60",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "steady state (MSER-5):" in proc.stdout
    summary = json.loads((run / "summary.json").read_text())
    steady = summary["phases"]["stream"]["steady"]
    ramp_end = USERS / SPAWN
    assert steady["applied"] and abs(steady["start_s"] - ramp_end) <= 5, steady
    assert steady["records_left_out"] > 0
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    # every issued request keeps its record; the statistics count only the steady part
    assert summary["input"]["records"] == len(records)
    assert summary["input"]["measured_records"] == len(records) - steady["records_left_out"]
    assert summary["phases"]["stream"]["count"] == summary["input"]["measured_records"]
    base = tmp_path / "base.json"
    assert llmload("report", "baseline", str(run), "--out", str(base)).returncode == 0
    doc = json.loads(base.read_text())
    assert doc["records"] == summary["input"]["measured_records"]
    assert doc["fingerprint"]["warmup"] == "auto"
    # the run against its own steady part: nothing differs, nothing regressed
    gate = llmload("report", "gate", str(run), "--baseline", str(base), "--metric", "ttft,itl")
    assert gate.returncode == 0, gate.stdout
