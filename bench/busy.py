"""A noisy neighbour on demand: N busy loops pinned to one CPU for S seconds, then gone.

``python -m bench.busy [CPU=0] [N=2] [SECONDS=60] &`` — to check that a test, a timing
figure or the CI gate survives a shared machine (the docs' "two busy loops per core"
is this, once per CPU). It stops by itself; Ctrl-C stops it early.
"""

from __future__ import annotations

import os
import sys
import time
from multiprocessing import Process


def _spin(cpu: int, until: float) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    while time.monotonic() < until:
        pass


def main(argv: list[str] | None = None) -> int:
    args = [int(a) for a in (sys.argv[1:] if argv is None else argv)]
    cpu, n, secs = (args + [0, 2, 60][len(args) :])[:3]
    until = time.monotonic() + secs
    procs = [Process(target=_spin, args=(cpu, until), daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join()
    except KeyboardInterrupt:
        for p in procs:
            p.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
