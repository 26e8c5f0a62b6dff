"""The master's way: a master slower than its workers loses no record and no worker.

``llmload run --workers 2`` whose master writes each record slowly (its run
writer made to spin 4 ms of CPU per record, in the master process only: the
run is started by a small script that patches it, then runs the real CLI).
The workers produce records several times faster than that.  Before the
master's queue (``loadtests.run.masterqueue``) the master fell behind inside
locust's receiving loop, heartbeats waited behind batches, and busy workers were
declared missing (their requests ``lost``, exit code 1).  Now every request the
server saw is one record, none lost, and past the queue's high-water mark the
workers were held (run.json ``master``, a warning), with the mark lowered here
so that the test sees it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.fixtures.loadtests import ROOT, server_requests

MASTER = r"""
import sys, time
from gevent import monkey
monkey.patch_all()

from llmload.loadtests.run import masterqueue, writer
from llmload.run import main

SPIN_S = float(sys.argv[1])
masterqueue.HIGH_WATER, masterqueue.LOW_WATER = 400, 100
on_record = writer.RunWriter.on_record

def slow(self, record):  # a master that cannot keep up: CPU, holding its loop
    until = time.perf_counter() + SPIN_S
    while time.perf_counter() < until:
        pass
    on_record(self, record)

writer.RunWriter.on_record = slow
sys.exit(main(sys.argv[2:]))
"""
SPIN_S = 0.004


def test_a_slow_master_loses_no_record(start_server_proc, tmp_path: Path) -> None:
    server = start_server_proc("--ttft-ms", "5", "--itl-ms", "2")
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            MASTER,
            str(SPIN_S),
            *("run", "--out", str(out), "--no-report", "--target", server.url),
            *("--workers", "2", "--users", "40", "--spawn-rate", "40", "--pacing", "0s"),
            *("--modes", "stream", "--duration", "5s", "--max-tokens", "4", "--ignore-eos"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    info = json.loads((out / "run.json").read_text())
    assert not info.get("lost_workers"), info.get("lost_workers")
    statuses = Counter(r["status"] for r in records)
    assert statuses["lost"] == 0 and statuses["ok"] == len(records), statuses
    # every request the server saw is one record, once
    assert len({r["request_id"] for r in records}) == len(records) == server_requests(server.url)
    # the workers outran the master: it held them, and says so
    master = info["master"]
    assert master["peak_waiting_records"] >= 400 and master["workers_held_s"] > 0, master
    assert "the master fell behind on records" in proc.stderr
