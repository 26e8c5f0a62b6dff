"""A worker SIGKILLed mid-phase: its unfinished requests become ``lost`` records, none vanish.

A real master (``--master``) and two real worker processes (``python -m llmload.loadtests
worker``), so the master learns of the death the way a remote one would: locust
declares the worker missing when its heartbeats stop.  The bundled server's
``llmserve_requests_total`` is the referee: the run must hold at least as many
records as requests the server saw.

The phase has a request budget and no time limit (``--num-prompts``): each worker
issues its own share, so the master must end the phase once a worker is lost (its
share will never come) instead of waiting for it forever.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path

from tests.fixtures.loadtests import ROOT, loadtests_cmd, server_requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def records_of(out: Path) -> list[dict]:
    path = out / "requests.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_killed_worker_loses_no_record(start_server_proc, tmp_path: Path) -> None:
    server = start_server_proc("--ttft-ms", "50", "--itl-ms", "20")
    port, out = free_port(), tmp_path / "lost"
    master = subprocess.Popen(
        loadtests_cmd(
            "run",
            "--out",
            str(out),
            "--no-report",
            "--target",
            server.url,
            "--master",
            "--expect-workers",
            "2",
            "--master-port",
            str(port),
            "--users",
            "8",
            "--pacing",
            "0s",
            "--num-prompts",
            "100000",
            "--modes",
            "stream",
            "--max-tokens",
            "48",
            "--ignore-eos",
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    worker_cmd = loadtests_cmd("worker", "--master-port", str(port))
    workers = [
        subprocess.Popen(worker_cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 60  # both workers have delivered records: mid-phase
        while time.monotonic() < deadline and master.poll() is None:
            if len({r["worker"] for r in records_of(out)}) == 2:
                break
            time.sleep(0.2)
        assert len({r["worker"] for r in records_of(out)}) == 2, master.stderr
        os.kill(workers[0].pid, signal.SIGKILL)
        _, stderr = master.communicate(timeout=90)
    finally:
        for proc in (master, *workers):
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)

    # the run says a worker was lost: exit code, stderr, run.json
    assert master.returncode == 1, stderr
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "failed" and len(info["lost_workers"]) == 1, info.get("lost_workers")
    lost_worker = info["lost_workers"][0]
    assert lost_worker["phase"] == "stream" and "heartbeats" in lost_worker["reason"]
    assert f"{lost_worker['worker']} was lost in phase stream" in stderr

    records = records_of(out)
    assert len({r["request_id"] for r in records}) == len(records) == info["records"]
    lost = [r for r in records if r["status"] == "lost"]
    # the killed worker had requests on the wire (8 back-to-back users, ~1 s each)
    assert len(lost) == lost_worker["lost_requests"] >= 1, Counter(r["status"] for r in records)
    assert all(r["worker"] == lost_worker["worker"] and r["started_at"] > 0 for r in lost)
    assert all("was lost before reporting this request" in r["error"] for r in lost)
    # every request the server saw is a record; the surplus never reached the server
    deadline = time.monotonic() + 10  # the server counts a cut stream at its next write
    while time.monotonic() < deadline and server_requests(server.url) > len(records):
        time.sleep(0.2)
    assert 0 < server_requests(server.url) <= len(records)
