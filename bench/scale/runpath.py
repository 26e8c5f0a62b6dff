"""Experiment 2, its last row: ``llmload run``'s own path at 1,000 users on one core."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from math import nan
from pathlib import Path
from typing import Any

from bench.mdsection import ROOT
from bench.scale.loadgen import CLIENT_ITL_MS
from llmload.loadtests.percentile import percentile_of


def run_path(users: int, duration: str, steady_after: float = 10.0) -> dict[str, Any]:
    """``llmload run`` itself — locust's runner, the users, the writer, the status line and
    the collector policy — at ``users`` back to back against the reference server (ITL
    50 ms, 16 tokens), pinned to one core as the bench child is: client − server TTFT from
    its records, over the whole phase and from ``steady_after`` s on (the users are
    spawned together, so the first requests go out as one burst), and its own health."""
    from bench.harness import _reference

    proc, url = _reference(CLIENT_ITL_MS)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            cmd = [sys.executable, "-m", "llmload", "run", "--target", url]
            cmd += ["--users", str(users), "--spawn-rate", str(users), "--pacing", "0s"]
            cmd += ["--modes", "stream", "--warmup", "0s", "--duration", duration]
            cmd += ["--max-tokens", "16", "--ignore-eos", "--no-report", "--out", str(out)]
            run = subprocess.run(
                cmd,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=300,
                preexec_fn=lambda: os.sched_setaffinity(0, {0}),
            )
            lines = (out / "requests.jsonl").read_text().splitlines() if out.exists() else []
            info = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    finally:
        proc.terminate()
        proc.wait(10)
    records = [json.loads(x) for x in lines if x.strip()]
    ok = [r for r in records if r.get("status") == "ok" and r.get("server_ttft_s")]
    began = min((r["started_at"] for r in ok), default=0.0)
    diff = [(r["ttft_s"] - r["server_ttft_s"]) * 1000 for r in ok]
    steady = [d for d, r in zip(diff, ok, strict=True) if r["started_at"] >= began + steady_after]
    phases = info.get("phases") or [{}]
    local = ((phases[-1].get("health") or {}).get("processes") or {}).get("local") or {}
    return {
        "users": users,
        "rc": run.returncode,
        "records": len(records),
        "errors": len(records) - len(ok),
        "p50": percentile_of(diff or [nan], 50),
        "p99": percentile_of(diff or [nan], 99),
        "steady_after": steady_after,
        "steady_n": len(steady),
        "steady_p50": percentile_of(steady or [nan], 50),
        "steady_p99": percentile_of(steady or [nan], 99),
        "cpu_p50": local.get("cpu_p50", nan),
        "lag_p99": local.get("lag_p99_ms", nan),
        "stderr": run.stderr[-300:] if run.returncode else "",
    }
