"""Machine-speed calibration recorded beside every benchmark figure.

Machines of one kind differ up to ~4x per core from day to day, so an absolute
figure (a latency, a tokens/s) means little without the speed of the machine
that produced it.  Two fixed workloads give that speed as ops/s:

* ``python_mloops_s`` — a fixed pure-Python loop (million iterations/s), the
  unit the harness's own code scales with;
* ``matmul_gflops`` — a fixed 512x512 float32 matmul on one thread (torch, else
  numpy), the unit the embedded model scales with;

plus the load average, so "slow machine" and "busy machine" can be told apart.
Every calibration line in BENCHMARKS.md and ``docs/`` is in these units.

Use::

    from bench.calibration import current
    cal = current()          # measured once per process, then cached
    print(cal.line())        # "calibration: python 38.1 Mloops/s, matmul 61.0 GFLOP/s ..."

``bench.mdsection.write_section`` appends ``current().line()`` to any section
that does not carry one already; call ``current()`` at the start of a bench to
measure before the bench loads the machine.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from dataclasses import asdict, dataclass

from llmload.loadtests.calibrate import python_loop

_MATMUL_N = 512
_MATMUL_REPEAT = 20


@dataclass(frozen=True)
class Calibration:
    """One calibration: speeds of two fixed workloads and the load at that moment."""

    python_mloops_s: float
    matmul_gflops: float | None
    matmul_with: str
    load1: float
    load5: float
    cores: int
    measured_at: float

    def line(self) -> str:
        """One Markdown-ready line for a BENCHMARKS.md section."""
        mm = "n/a"
        if self.matmul_gflops:
            mm = f"{self.matmul_gflops:.1f} GFLOP/s ({self.matmul_with})"
        return (
            f"calibration: python {self.python_mloops_s:.1f} Mloops/s, matmul {mm}; "
            f"load average {self.load1:.1f} (1 min) / {self.load5:.1f} (5 min) "
            f"on {self.cores} cores"
        )

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _matmul() -> tuple[float | None, str]:
    flop = _MATMUL_REPEAT * 2 * _MATMUL_N**3
    with contextlib.suppress(ImportError):  # no torch (the slim core): numpy below
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            a = torch.randn(_MATMUL_N, _MATMUL_N)
            a @ a  # first call allocates
            t = time.perf_counter()
            for _ in range(_MATMUL_REPEAT):
                a @ a
            return flop / (time.perf_counter() - t) / 1e9, "torch, 1 thread"
        finally:
            torch.set_num_threads(threads)
    try:
        import numpy as np

        b = np.random.default_rng(0).random((_MATMUL_N, _MATMUL_N), dtype=np.float32)
        t = time.perf_counter()
        for _ in range(_MATMUL_REPEAT):
            b @ b
        return flop / (time.perf_counter() - t) / 1e9, "numpy"
    except ImportError:
        return None, "none"


def measure(repeat: int = 3) -> Calibration:
    """Measure now (best of ``repeat`` for each workload; ~1 s on a slow machine)."""
    load1, load5, _ = os.getloadavg()
    loops = max(python_loop() for _ in range(repeat))
    best: tuple[float | None, str] = (None, "none")
    for _ in range(repeat):
        g, how = _matmul()
        if g is not None and (best[0] is None or g > best[0]):
            best = (g, how)
        elif g is None:
            best = (None, how)
            break
    return Calibration(
        python_mloops_s=loops,
        matmul_gflops=best[0],
        matmul_with=best[1],
        load1=load1,
        load5=load5,
        cores=os.cpu_count() or 1,
        measured_at=time.time(),
    )


@functools.lru_cache(maxsize=1)
def current() -> Calibration:
    """This process's calibration: measured on the first call, the same object after."""
    return measure()


if __name__ == "__main__":
    print(current().line())
