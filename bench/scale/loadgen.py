"""Experiment 2: the load generator on one client core, its client paths interleaved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from bench.mdsection import ROOT

CLIENT_ITL_MS = 50
#: the load generator's two HTTP paths, measured interleaved (http1 first: the default)
CLIENT_PATHS = ("http1", "http1, reads unstamped", "httpx")
#: the http1 client with its reads timed when they return, not by the kernel's receive stamps
UNSTAMPED = CLIENT_PATHS[1]


def client_row(streams: int, client: str = "http1") -> dict[str, Any]:
    """``bench harness``'s child (``client``: one of ``CLIENT_PATHS``) at ``streams``
    against the reference server (ITL 50 ms).

    Also how long the child was runnable but not running (``schedstat``): on a shared
    machine that, not the client's work, is what its latency then shows.
    """
    from bench.harness import _reference
    from bench.server_timing import runqueue_wait_s

    env = {**os.environ, "LLMLOAD_RECV_STAMPS": "0" if client == UNSTAMPED else "1"}
    proc, url = _reference(CLIENT_ITL_MS)
    try:
        cmd = [sys.executable, "-m", "bench.harness", "--child", client.split(",")[0], url]
        cmd += [str(streams), str(CLIENT_ITL_MS)]
        t0 = time.monotonic()
        child = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        wait = 0.0
        while child.poll() is None:
            wait = runqueue_wait_s(child.pid) or wait
            time.sleep(0.2)
        out, err = child.communicate(timeout=120)
        wall = time.monotonic() - t0
    finally:
        proc.terminate()
        proc.wait(10)
    if child.returncode != 0:
        return {"streams": streams, "client": client, "error": err.strip()[-300:]}
    r: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    r["client"] = client
    cpu = r.get("client_cpu") or float("nan")
    r["per_cpu_s"] = r.get("events_per_s", 0) / (cpu / 100) if cpu == cpu and cpu else 0.0
    r["client_wait"] = 100 * wait / wall
    print(json.dumps(r), flush=True)
    return r
