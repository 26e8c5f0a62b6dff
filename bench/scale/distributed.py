"""Experiment 4: ``llmload run --workers N``: records lost, the master's CPU per record."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from bench.mdsection import ROOT
from llmload.target_server.launch import launch


def _server_requests(url: str) -> int:
    import httpx

    text = httpx.get(url + "/metrics", timeout=30).text
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("llmserve_requests_total{")
        )
    )


def distributed(users: int, workers: int, duration: str) -> dict[str, Any]:
    """One distributed run; the master's CPU sampled until it exits."""
    args = ["--log-level", "warning", "--ttft-ms", "50", "--itl-ms", "50"]
    with launch(args, cwd=ROOT, ready_timeout=60) as server, tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "llmload", "run", "--target", server.url]
        cmd += ["--workers", str(workers), "--users", str(users), "--spawn-rate", str(users)]
        cmd += ["--pacing", "0s", "--modes", "stream", "--duration", duration]
        cmd += ["--max-tokens", "16", "--ignore-eos", "--no-report", "--out", str(out)]
        before = _server_requests(server.url)
        t0 = time.monotonic()
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        master = psutil.Process(proc.pid)
        cpu = 0.0
        while proc.poll() is None:
            try:
                t = master.cpu_times()
                cpu = t.user + t.system
            except psutil.NoSuchProcess:
                break
            time.sleep(0.2)
        _, err = proc.communicate(timeout=60)
        wall = time.monotonic() - t0
        served = _server_requests(server.url) - before
        lines = (out / "requests.jsonl").read_text().splitlines() if out.exists() else []
        records = [json.loads(x) for x in lines if x.strip()]
        info = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    return {
        "users": users,
        "workers": workers,
        "rc": proc.returncode,
        "records": len(records),
        "served": served,
        "lost": sum(1 for r in records if r.get("status") == "lost"),
        "lost_workers": len(info.get("lost_workers") or []),
        "master_cpu_s": cpu,
        "us_per_record": cpu / len(records) * 1e6 if records else float("nan"),
        "wall": wall,
        "stderr": err[-300:] if proc.returncode else "",
    }


def master_cost(users: int, workers: int, duration: str) -> dict[str, Any]:
    """The large run, its ``us_per_record`` the master's CPU per extra record over a small run.

    The slope between a small and a large run of the same length: start-up (spawning
    workers, imports) cancels out.  The small run is kept under ``small``.
    """
    small = distributed(workers, workers, duration)
    print(json.dumps(small), flush=True)
    big = distributed(users, workers, duration)
    print(json.dumps(big), flush=True)
    extra = big["records"] - small["records"]
    big["us_per_record"] = (
        (big["master_cpu_s"] - small["master_cpu_s"]) / extra * 1e6 if extra > 0 else float("nan")
    )
    big["small"] = small
    return big
