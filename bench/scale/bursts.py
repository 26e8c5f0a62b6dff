"""Experiment 3: bursts of 20 users, lock-step or spread, against both servers."""

from __future__ import annotations

import json
import subprocess
import sys
from math import nan
from typing import Any

from bench.mdsection import ROOT
from llmload.loadtests.percentile import percentile_of
from llmload.target_server.launch import launch

BURST_USERS, BURST_PACING_S, BURST_ROUNDS = 20, 1.0, 11
BURST_TTFT_MS, BURST_ITL_MS, BURST_TOKENS = 200, 20, 16


def burst_child(url: str, first_start: str) -> dict[str, Any]:
    """(gevent child) 20 closed-loop users, 1 s pacing; client − server TTFT per request."""
    from bench.client import gevent_client

    setup = gevent_client(url, BURST_TOKENS)
    import gevent

    from llmload.loadtests.measure.timing import RecordMeta, StreamTimer
    from llmload.loadtests.run.shapes import first_start_offset
    from llmload.loadtests.transport.target import clock, perform

    meta = RecordMeta("x", "bench", "bench", "stream", setup.adapter.endpoint, 0.0)
    gaps: list[float] = []
    start = clock() + 0.2

    def user(i: int) -> None:
        sess = setup.target.user_client()
        offset = 0.0 if first_start == "together" else first_start_offset(0, i, BURST_PACING_S)
        for k in range(BURST_ROUNDS):
            gevent.sleep(max(0.0, start + offset + k * BURST_PACING_S - clock()))
            timer = StreamTimer(setup.adapter, clock())
            perform(sess, setup.target, setup.call, timer)
            rec = timer.finish(clock(), meta)
            if k and rec.ok and rec.ttft_s and rec.server_ttft_s:  # round 0 warms up
                gaps.append((rec.ttft_s - rec.server_ttft_s) * 1000)

    gevent.joinall([gevent.spawn(user, i) for i in range(BURST_USERS)])
    return {
        "n": len(gaps),
        "p50": percentile_of(gaps or [nan], 50),
        "p99": percentile_of(gaps or [nan], 99),
        "max": max(gaps),
    }


def burst_rows() -> list[dict[str, Any]]:
    """Both servers at TTFT 200 ms / ITL 20 ms, both first-start modes."""
    rows: list[dict[str, Any]] = []
    ref = [str(BURST_TTFT_MS), str(BURST_ITL_MS)]
    bundled = ["--log-level", "warning", "--ttft-ms", str(BURST_TTFT_MS)]
    bundled += ["--itl-ms", str(BURST_ITL_MS)]
    for name, module, args in (
        ("reference", "bench.harness_server", ref),
        ("bundled", "llmload.target_server", bundled),
    ):
        server = launch(
            args,
            module=module,
            cwd=ROOT,
            loopback=module == "llmload.target_server",
            health=module == "llmload.target_server",
        )
        try:
            for mode in ("together", "spread"):
                # ``bench.scale.main`` runs ``burst_child`` in a fresh process (gevent patches it)
                cmd = [sys.executable, "-m", "bench.scale", "--burst-child", server.url, mode]
                out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
                if out.returncode != 0:
                    rows.append({"server": name, "mode": mode, "error": out.stderr[-300:]})
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append({"server": name, "mode": mode, **r})
                print(json.dumps(rows[-1]), flush=True)
        finally:
            server.stop()
    return rows
