"""The master's way: workers' messages queued as they arrive, handled in order, held back.

A distributed master gets every record of every worker.  locust calls a
message's handler inside its one receiving loop, so a master slower than its
workers (a slow disk under ``requests.jsonl``, thousands of short requests a
second) used to fall behind *in that loop*: heartbeats waited behind batches,
and after three seconds locust declared a busy worker missing — its requests
became ``lost`` records and the run failed.  Behind that, the workers' sends
filled ZeroMQ's queue and, after locust's retries, raised.

``MasterQueue`` takes a message off that loop at once (a batch, or a worker's
end-of-phase acknowledgement, which must come after its batches) and hands the
items to the hub from its own greenlet, in arrival order, letting the loop run
between batches — so heartbeats are read on time however far behind the records
are.  Nothing is dropped: the queue holds what the master has not yet written.
It does not grow without bound either: past ``high`` records waiting the master
tells every worker to hold (``llmload_hold``: no user starts a new request; those
in flight finish, their records wait in the worker), and lets them go again once
the queue is down to ``low``.  The load the run applied is then less than asked
for; how long the workers were held and the most records ever waiting go into
``run.json`` (``master``) and a warning.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import gevent
from gevent.event import Event

log = logging.getLogger(__name__)
#: records waiting at which the workers are held, and at which they are let go
HIGH_WATER = 50_000
LOW_WATER = 10_000
#: records handled between two turns of the receiving loop
TURN = 256


class MasterQueue:
    """Items ``(handler, data, records)`` handled in order on a greenlet of their own."""

    def __init__(
        self, hold: Callable[[bool], None], high: int | None = None, low: int | None = None
    ) -> None:
        self._items: deque[tuple[Callable[[Any], None], Any, int]] = deque()
        self._hold = hold
        self.high = HIGH_WATER if high is None else high
        self.low = LOW_WATER if low is None else low
        self.waiting = 0  # records queued, not yet handled
        self.peak = 0
        self.handled = 0  # items handled (progress, for a waiter)
        self.held = False
        self.held_s = 0.0
        self._held_at = 0.0
        self._wake = Event()
        self._worker = gevent.spawn(self._run)

    def put(self, handler: Callable[[Any], None], data: Any, records: int = 0) -> None:
        """Queue one message's work (``records``: how many records it carries)."""
        self._items.append((handler, data, records))
        self.waiting += records
        self.peak = max(self.peak, self.waiting)
        if not self.held and self.waiting >= self.high:
            self._set_hold(True)
        self._wake.set()

    def drain_now(self) -> None:
        """Handle everything queued, here and now (before a worker's requests are judged lost)."""
        while self._items:
            self._one()

    @property
    def empty(self) -> bool:
        return not self._items

    def close(self) -> None:
        self.drain_now()
        self._worker.kill()
        if self.held:
            self._set_hold(False)

    def stats(self) -> dict[str, Any]:
        """For ``run.json``: the most records ever waiting, how long the workers were held."""
        held = self.held_s + (time.monotonic() - self._held_at if self.held else 0.0)
        return {"peak_waiting_records": self.peak, "workers_held_s": round(held, 3)}

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            done = 0
            while self._items:
                done += self._one()
                if done >= TURN:  # let the receiving loop read what came meanwhile
                    done = 0
                    gevent.sleep(0)

    def _one(self) -> int:
        handler, data, records = self._items.popleft()
        try:
            handler(data)
        except Exception:  # one bad message must not stop the records behind it
            log.exception("master: handling a worker's message failed")
        self.waiting -= records
        self.handled += 1
        if self.held and self.waiting <= self.low:
            self._set_hold(False)
        return max(records, 1)

    def _set_hold(self, hold: bool) -> None:
        self.held = hold
        now = time.monotonic()
        if hold:
            self._held_at = now
            log.warning(
                "master: %d records waiting to be written: workers hold new requests",
                self.waiting,
            )
        else:
            self.held_s += now - self._held_at
        try:
            self._hold(hold)
        except Exception:
            log.exception("master: telling the workers to %s failed", "hold" if hold else "go")
