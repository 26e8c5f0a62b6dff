"""Many sleepers, one timer per tick: the synthetic engine's token clock.

At 1,000 streams and a 50 ms inter-token latency a server wakes 20,000 token
deadlines a second.  ``asyncio.sleep`` gives each one its own timer (a handle,
a heap push and pop, a callback); ``Pacer`` puts every deadline on a grid of
``tick`` seconds and arms one timer per occupied tick, which resolves all of that
tick's waiters together — about one timer per millisecond however many streams.

A deadline goes to the nearest tick (a series of them keeps its mean); with
``exact=True`` (a first token: TTFT is never below the configured one) to the
next tick at or after it, waiting again when the timer fired early (uvloop's
millisecond timers can, by up to ~1 ms on a busy machine).
"""

from __future__ import annotations

import asyncio
import math
from time import perf_counter

DEFAULT_TICK_S = 0.001


class Pacer:
    """``await pacer.until(deadline)`` (a ``perf_counter`` time) for any number of tasks."""

    def __init__(self, tick: float = DEFAULT_TICK_S):
        if tick <= 0:
            raise ValueError("tick must be > 0")
        self.tick = tick
        #: (event loop, tick) -> its waiters; keyed by loop too, so an engine used from
        #: two loops (tests run servers on threads) never wakes one loop's future from another
        self._slots: dict[tuple[int, int], list[asyncio.Future[None]]] = {}
        self.timers = 0  # timers armed so far (for the benchmarks: timers per token)
        self.waits = 0  # waits that needed one

    async def until(self, deadline: float, exact: bool = False) -> None:
        """Return around ``deadline`` (a ``perf_counter`` time); never before it if ``exact``.

        Not ``exact``: the deadline goes to the nearest tick, so a wake-up is within
        about half a tick (plus the loop's own timer error) either side and a series
        of them keeps its mean.  ``exact``: the next tick at or after it, and a timer
        that fired early is waited out.
        """
        while (now := perf_counter()) < deadline:
            loop = asyncio.get_running_loop()
            k = math.ceil(deadline / self.tick) if exact else round(deadline / self.tick)
            fut: asyncio.Future[None] = loop.create_future()
            key = (id(loop), k)
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = []
                self.timers += 1
                loop.call_later(max(0.0, k * self.tick - now), self._fire, key)
            slot.append(fut)
            self.waits += 1
            await fut
            if not exact:
                return

    def _fire(self, key: tuple[int, int]) -> None:
        for fut in self._slots.pop(key, ()):
            if not fut.done():  # a cancelled waiter is skipped
                fut.set_result(None)

    def pending(self) -> int:
        """Waiters not yet woken (cancelled ones included until their tick)."""
        return sum(len(s) for s in self._slots.values())
