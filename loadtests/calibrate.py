"""The load generator's own speed in a fraction of a second: what a run's calibration line says.

``python_loop()`` times a fixed pure-Python loop (2 million iterations) and gives
million iterations per second: the unit the harness's own code scales with, and
the one ``bench.calibration`` (which adds a matmul) writes beside every benchmark
figure.  ``quick()`` is what ``llmload run`` records in ``run.json``
(``calibration``), measured once before the first request: one loop and the load
average — about 0.1 s at 20 Mloops/s, 0.25 s at the slow end (8 Mloops/s).
"""

from __future__ import annotations

import os
import time
from typing import Any

LOOP_N = 2_000_000


def python_loop(n: int = LOOP_N) -> float:
    """Million iterations per second of a fixed pure-Python loop."""
    x, t = 0, time.perf_counter()
    for i in range(n):
        x += i & 7
    return n / (time.perf_counter() - t) / 1e6


def quick() -> dict[str, Any]:
    """``{"python_mloops_s", "load1", "cores", "seconds", "line"}``: one loop, now."""
    load1 = os.getloadavg()[0]
    started = time.perf_counter()
    loops = python_loop()
    cores = os.cpu_count() or 1
    return {
        "python_mloops_s": round(loops, 2),
        "load1": round(load1, 2),
        "cores": cores,
        "seconds": round(time.perf_counter() - started, 3),
        "line": f"calibration: python {loops:.1f} Mloops/s; load average {load1:.1f} (1 min) "
        f"on {cores} cores",
    }
