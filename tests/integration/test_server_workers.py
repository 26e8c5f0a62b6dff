"""``llmload serve --workers N``: N processes on one port, spread by the kernel."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import psutil

from llmload.target_server.launch import launch

ROOT = Path(__file__).resolve().parents[2]
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}


def _total(text: str) -> float:
    return sum(
        float(m.group(1))
        for m in re.finditer(r"^llmserve_requests_total\{[^}]*\} (\S+)$", text, re.M)
    )


def test_two_workers_share_the_port_and_stop_together() -> None:
    args = ["--workers", "2", "--log-level", "warning", "--ttft-ms", "1", "--itl-ms", "1"]
    with launch(args, cwd=ROOT, ready_timeout=60) as server:
        parent = psutil.Process(server.proc.pid)
        workers = parent.children()
        assert len(workers) == 2
        n = 41  # odd: the two workers' totals differ, so two scrapes can tell them apart
        for _ in range(n):  # a new connection each time: SO_REUSEPORT hashes each one
            with httpx.Client(base_url=server.url, timeout=30) as c:
                r = c.post("/v1/chat/completions", json=BODY)
                assert r.status_code == 200 and "data: [DONE]" in r.text
        seen = set()
        for _ in range(30):  # each scrape lands on one worker: its own counters
            with httpx.Client(base_url=server.url, timeout=30) as c:
                seen.add(_total(c.get("/metrics").text))
            if len(seen) == 2:
                break
        assert len(seen) == 2, seen  # both workers answered requests
        assert sum(seen) == n and min(seen) > 0
        code = server.stop()
    assert code == 0
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)


def test_workers_must_be_positive() -> None:
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "llmload.target_server", "--workers", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "workers must be >= 1" in r.stderr


def test_a_worker_that_dies_stops_the_server() -> None:
    args = ["--workers", "2", "--log-level", "warning"]
    with launch(args, cwd=ROOT, ready_timeout=60) as server:
        parent = psutil.Process(server.proc.pid)
        victim, other = parent.children()
        victim.kill()
        code = server.proc.wait(30)  # the parent notices and stops the other worker
        assert code == 1
        assert "exited" in server.tail(5)
        other.wait(10)


def test_a_worker_that_cannot_start_fails_the_server() -> None:
    import subprocess
    import sys

    # a checkpoint that is not there: each worker's engine fails after it listens (as a
    # single server does), the parent stops the rest and exits 1
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmload.target_server",
            "--workers",
            "2",
            "--port",
            "0",
            "--engine",
            "transformers",
            "--model",
            "/nonexistent/ckpt",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr[-2000:]
    assert "engine failed" in r.stderr
