"""Experiment 1: the bundled server's own TTFT error and CPU per SSE event at N streams."""

from __future__ import annotations

import asyncio
from math import nan
from typing import Any

import psutil

from bench.mdsection import ROOT
from llmload.loadtests.percentile import percentile_of
from llmload.target_server.launch import launch

SERVER_TTFT_MS, SERVER_ITL_MS, SERVER_TOKENS = 100, 50, 40


def tree_cpu(proc: psutil.Process) -> float:
    """CPU seconds of a process and its children (a ``--workers`` server)."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            continue
    return total


def server_row(streams: int, workers: int, window: float) -> dict[str, Any]:
    """One bundled server (``workers`` processes), ``streams`` raw-socket streams against it."""
    from bench.server_timing import run_level, runqueue_wait_s

    args = ["--log-level", "warning", "--ttft-ms", str(SERVER_TTFT_MS)]
    args += ["--itl-ms", str(SERVER_ITL_MS), "--workers", str(workers)]
    with launch(args, cwd=ROOT, ready_timeout=60) as server:
        proc = psutil.Process(server.proc.pid)
        pids = [proc.pid, *(c.pid for c in proc.children(recursive=True))]
        cpu0, wait0 = tree_cpu(proc), sum(runqueue_wait_s(p) for p in pids)
        lv = asyncio.run(run_level(server.url, streams, SERVER_TOKENS, window))
        cpu = tree_cpu(proc) - cpu0
        wait = sum(runqueue_wait_s(p) for p in pids) - wait0
    err = [v * 1000 - SERVER_TTFT_MS for v in lv.ttft_server]
    return {
        "streams": streams,
        "workers": workers,
        "requests": len(err),
        "errors": lv.errors,
        "events_per_s": lv.events / lv.wall,
        "server_cpu": 100 * cpu / lv.wall,
        "server_wait": 100 * wait / lv.wall,
        "us_per_event": cpu / lv.events * 1e6 if lv.events else nan,
        "p50": percentile_of(err or [nan], 50),
        "p99": percentile_of(err or [nan], 99),
        "max": max(err, default=nan),
    }
