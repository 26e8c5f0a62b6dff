"""How busy is this load-generator process?  CPU % and event-loop lag, sampled.

A ticker sleeps ``tick_s`` over and over and measures how late it wakes up.
Under gevent monkey-patching (locust) ``time.sleep`` yields to the hub and
``threading.Thread`` is a greenlet, so the overshoot is the hub's latency: how
long a ready greenlet — a user about to read its next SSE event — waits
because other greenlets hold the CPU.  Without patching the ticker is an OS
thread and the overshoot is the wait for the GIL and the scheduler.  Both are
looked up at ``start`` time, so the sampler follows whichever world it runs in.

Each snapshot reports the worst lag since the previous snapshot, so a short
stall between two samples is not averaged away.

It also reports the host's *steal*: the share of its CPUs' time the hypervisor
gave to other guests since the previous snapshot (``steal`` in ``/proc/stat``;
0 on bare metal and where the kernel does not count it).  On a shared virtual
machine — most CI runners — steal comes in bursts that stretch every step of a
model running on that host, so a run that met more of it is slower for reasons
no build change made (docs/reports.md, "What moves a run's TTFT p95").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import psutil

from llmload.loadtests.run.sinks import HarnessHealth

log = logging.getLogger(__name__)

#: How often the ticker wakes up to measure lag.
DEFAULT_TICK_S = 0.05
#: How often ``on_snapshot`` is called.
DEFAULT_INTERVAL_S = 1.0


def host_times() -> tuple[float, float]:
    """The host's CPU seconds in all (every mode, all CPUs) and of them stolen."""
    t = psutil.cpu_times()._asdict()
    # Linux counts guest time inside user and nice already
    total = sum(v for k, v in t.items() if k not in ("guest", "guest_nice"))
    return float(total), float(t.get("steal", 0.0))


class HealthSampler:
    """Samples this process; ``snapshot()`` on demand, or ``on_snapshot`` every interval."""

    def __init__(
        self,
        on_snapshot: Callable[[HarnessHealth], None] | None = None,
        *,
        inflight: Callable[[], int] = lambda: 0,
        interval_s: float = DEFAULT_INTERVAL_S,
        tick_s: float = DEFAULT_TICK_S,
    ) -> None:
        self.on_snapshot = on_snapshot
        self.inflight = inflight
        self.interval_s = interval_s
        self.tick_s = tick_s
        self._process = psutil.Process()
        self._worst_lag = 0.0
        self._cpu_times = host_times()
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start ticking in the background (a greenlet under gevent, else a thread)."""
        if self._thread is not None:
            return
        self._process.cpu_percent(None)  # prime: the next call measures from here
        self._cpu_times = host_times()
        self._worst_lag = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="llmload-health", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the ticker and wait for it; idempotent."""
        thread, stop = self._thread, self._stop
        self._thread = None
        if thread is None or stop is None:
            return
        stop.set()
        thread.join(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None

    def snapshot(self) -> HarnessHealth:
        """CPU % since the previous snapshot, worst lag since then, requests in flight."""
        lag, self._worst_lag = self._worst_lag, 0.0
        now = host_times()
        (total0, steal0), (total1, steal1) = self._cpu_times, now
        self._cpu_times = now
        steal = 100.0 * (steal1 - steal0) / (total1 - total0) if total1 > total0 else 0.0
        return HarnessHealth(
            cpu_percent=float(self._process.cpu_percent(None)),
            loop_lag_s=lag,
            inflight=int(self.inflight()),
            steal_percent=round(max(0.0, steal), 2),
        )

    def _run(self) -> None:
        stop = self._stop
        assert stop is not None
        next_report = time.monotonic() + self.interval_s
        while not stop.is_set():
            began = time.perf_counter()
            time.sleep(self.tick_s)  # looked up per call: gevent's sleep when patched
            late = time.perf_counter() - began - self.tick_s
            if late > self._worst_lag:
                self._worst_lag = late
            now = time.monotonic()
            if self.on_snapshot is not None and now >= next_report:
                # after a stall, report once and resume the cadence (no burst of catch-ups)
                next_report = max(next_report + self.interval_s, now)
                try:
                    self.on_snapshot(self.snapshot())
                except Exception:  # a failing consumer must not end the sampling
                    log.exception("health: on_snapshot failed")
