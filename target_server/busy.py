"""How busy an engine is: the share of wall time it spent working, over a sliding window.

No torch here: the model engines (``target_server.model``) and the synthetic
engine read their ``llmserve_engine_busy_ratio`` gauge from these meters.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any


class BusyMeter:
    """How much of the wall time the engine spent computing, over a sliding window.

    One thread calls ``begin``/``end`` around each unit of work (a decode turn, or
    "at least one generate thread alive"); any thread may read ``ratio``.
    """

    def __init__(self, window_s: float = 10.0, mark_every_s: float = 0.5):
        self.window_s, self.mark_every_s = window_s, mark_every_s
        self.total = 0.0
        self._since: float | None = None
        self._marks: deque[tuple[float, float]] = deque([(time.perf_counter(), 0.0)], maxlen=256)

    def begin(self, now: float | None = None) -> None:
        self._since = time.perf_counter() if now is None else now

    def end(self, now: float | None = None) -> None:
        if self._since is None:
            return
        now = time.perf_counter() if now is None else now
        self.total += now - self._since
        self._since = None
        if now - self._marks[-1][0] >= self.mark_every_s:
            self._marks.append((now, self.total))

    def busy_s(self, now: float | None = None) -> float:
        """Seconds spent busy since the start (the work in progress included)."""
        now = time.perf_counter() if now is None else now
        since = self._since
        return self.total + (now - since if since is not None else 0.0)

    def ratio(self, now: float | None = None) -> float:
        """Busy fraction of the last ``window_s`` (or since the newest older mark)."""
        now = time.perf_counter() if now is None else now
        marks = list(self._marks)
        t0, b0 = marks[0]
        for t, b in marks:
            if t > now - self.window_s:
                break
            t0, b0 = t, b
        if now <= t0:
            return 0.0
        return max(0.0, min(1.0, (self.busy_s(now) - b0) / (now - t0)))


class CpuMeter(BusyMeter):
    """The process's CPU seconds as the busy time (the synthetic engine's meter).

    The synthetic engine computes nothing; what limits it is its event loop's one
    core, so its busy share is the CPU its process used per wall second (clipped
    to 1).  Marks are taken when the ratio is read (each scrape), not by the work.
    """

    def __init__(
        self,
        window_s: float = 10.0,
        mark_every_s: float = 0.5,
        cpu: Callable[[], float] = time.process_time,
    ):
        super().__init__(window_s, mark_every_s)
        self._cpu = cpu
        self._marks[0] = (self._marks[0][0], cpu())

    def busy_s(self, now: float | None = None) -> float:
        """CPU seconds the process has used (``now`` is not needed: the clock is the CPU's)."""
        return self._cpu()

    def ratio(self, now: float | None = None) -> float:
        """CPU share of the last ``window_s`` (or since the newest older mark)."""
        now = time.perf_counter() if now is None else now
        if now - self._marks[-1][0] >= self.mark_every_s:
            self._marks.append((now, self.busy_s()))
        return super().ratio(now)


class PublishedMeter(BusyMeter):
    """A ``BusyMeter`` that also writes its state to shared memory for another process.

    ``shared[0]``: busy seconds so far (finished work); ``shared[1]``: the
    ``perf_counter`` when the work in progress began, 0 when idle.  ``perf_counter``
    is the system-wide monotonic clock on Linux and macOS, so the reader's ``now``
    and the writer's ``since`` are on one clock.
    """

    def __init__(self, shared: Any, window_s: float = 10.0, mark_every_s: float = 0.5):
        super().__init__(window_s, mark_every_s)
        self.shared = shared

    def begin(self, now: float | None = None) -> None:
        super().begin(now)
        self.shared[1] = self._since

    def end(self, now: float | None = None) -> None:
        super().end(now)
        self.shared[0] = self.total
        self.shared[1] = 0.0


class SharedMeter(BusyMeter):
    """Reads a ``PublishedMeter`` of another process (the engine process's decode loop).

    Marks are taken when the ratio is read (each scrape), as ``CpuMeter`` does.
    """

    def __init__(self, shared: Any, window_s: float = 10.0, mark_every_s: float = 0.5):
        super().__init__(window_s, mark_every_s)
        self.shared = shared
        self._marks[0] = (self._marks[0][0], self.busy_s(self._marks[0][0]))

    def busy_s(self, now: float | None = None) -> float:
        now = time.perf_counter() if now is None else now
        for _ in range(3):  # a consistent pair: the writer may move between the two reads
            since = float(self.shared[1])
            total = float(self.shared[0])
            if float(self.shared[1]) == since:
                break
        return total + (max(0.0, now - since) if since else 0.0)

    def ratio(self, now: float | None = None) -> float:
        now = time.perf_counter() if now is None else now
        if now - self._marks[-1][0] >= self.mark_every_s:
            self._marks.append((now, self.busy_s(now)))
        return super().ratio(now)
