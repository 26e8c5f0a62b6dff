"""Admission control: at most N requests generating, a bounded FIFO queue, 429 beyond."""

from __future__ import annotations

import asyncio
from collections import deque


class Rejected(Exception):
    """The queue is full: answer 429."""


class Admission:
    """Slots for generating requests plus a bounded FIFO of waiters.

    ``limit == 0`` means unlimited.  ``running`` and ``waiting`` are read by the
    metrics collector at scrape time, so they are always current.
    """

    def __init__(self, limit: int, max_queue: int):
        self.limit = limit
        self.max_queue = max_queue
        self.running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot."""
        return len(self._waiters)

    async def acquire(self) -> None:
        """Take a slot, waiting in FIFO order; raises ``Rejected`` when the queue is full."""
        if self.limit == 0 or (self.running < self.limit and not self._waiters):
            self.running += 1
            return
        if len(self._waiters) >= self.max_queue:
            raise Rejected
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                # the slot was handed to us just as we were cancelled: pass it on
                self.release()
            elif fut in self._waiters:
                self._waiters.remove(fut)
            raise

    def release(self) -> None:
        """Give a slot back; hands it straight to the oldest waiter when there is one."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot moves over: running is unchanged
                return
        self.running -= 1
