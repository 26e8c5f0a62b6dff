"""One timer per millisecond for the synthetic engine's token clock.

At 1,000 streams and a 50 ms inter-token latency a server wakes 20,000 token
deadlines a second.  ``asyncio.sleep`` gives each one its own timer (a handle,
a heap push and pop, a callback); ``Pacer`` puts every deadline on a grid of
``tick`` seconds and arms one timer per occupied tick, which serves all of that
tick's entries together — about one timer per millisecond however many streams.

An entry is a waiting task (``await pacer.until(deadline)``) or a plain callback
(``pacer.call_at(deadline, fn)``): a callback runs inside the tick itself, so a
stream driven that way (``target_server.generation``: a token written straight to
its connection) costs no task wake-up at all.

A deadline goes to the nearest tick (a series of them keeps its mean); with
``exact=True`` (a first token: TTFT is never below the configured one) to the
next step at or after it of a grid ten times finer (``EXACT_STEPS``: one first
token per request, ~500 a second at 1,000 streams of 2 s requests against ~20,000
later ones, so they share few timers anyway and should not wait up to a whole
tick), on timers that never run before their time: one that fired early (uvloop's
millisecond timers can, by up to ~1 ms) is re-armed for the rest — a short spin
(its CPU per first token, measured: ``docs/scale.md``, *The bundled server*, "One
timer per millisecond"), paid only by first tokens.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable, Iterator
from time import perf_counter
from typing import TypeVar

DEFAULT_TICK_S = 0.001
#: an exact deadline's grid: this many steps per tick
EXACT_STEPS = 10

#: what a tick holds: futures of waiting tasks, or callbacks
_Entry = asyncio.Future[None] | Callable[[], None]
T = TypeVar("T")


class Pacer:
    """``await pacer.until(deadline)`` or ``pacer.call_at(deadline, fn)``, any number at once."""

    def __init__(self, tick: float = DEFAULT_TICK_S):
        if tick <= 0:
            raise ValueError("tick must be > 0")
        self.tick = tick
        self._step = tick / EXACT_STEPS
        #: (event loop, tick, exact) -> its entries; keyed by loop too, so an engine used from
        #: two loops (tests run servers on threads) never wakes one loop's future from another
        self._slots: dict[tuple[int, int, bool], list[_Entry]] = {}
        self.timers = 0  # timers armed so far (for the benchmarks: timers per token)
        self.waits = 0  # entries that needed one

    def _slot(self, deadline: float, exact: bool, now: float) -> list[_Entry]:
        loop = asyncio.get_running_loop()
        k = math.ceil(deadline / self._step) if exact else round(deadline / self.tick)
        key = (id(loop), k, exact)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = []
            self.timers += 1
            at = k * self._step if exact else k * self.tick
            loop.call_later(max(0.0, at - now), self._fire, key, loop)
        self.waits += 1
        return slot

    async def until(self, deadline: float, exact: bool = False) -> None:
        """Return around ``deadline`` (a ``perf_counter`` time); never before it if ``exact``.

        Not ``exact``: the deadline goes to the nearest tick, so a wake-up is within
        about half a tick (plus the loop's own lateness) either side and a series
        of them keeps its mean.  ``exact``: the next step of the finer grid at or
        after it.
        """
        while (now := perf_counter()) < deadline:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._slot(deadline, exact, now).append(fut)
            await fut
            if not exact:
                return

    async def paced(self, table: Iterator[tuple[float, T]]) -> AsyncIterator[T]:
        """``table``'s items, each at its deadline (the first ``exact``: never early), for a
        task that awaits them; ``table`` is closed when this generator is."""
        until, exact = self.until, True
        try:
            for deadline, item in table:
                if deadline > perf_counter():  # one shared timer per tick
                    await until(deadline, exact)
                exact = False
                yield item
        finally:
            close = getattr(table, "close", None)
            if close is not None:
                close()

    def call_at(
        self, deadline: float, fn: Callable[[], None], exact: bool = False, now: float = 0.0
    ) -> None:
        """Run ``fn()`` in the tick of ``deadline`` (same rounding as ``until``), from the
        running event loop; at once (synchronously) when the deadline has passed.
        ``now``: the caller's fresh ``perf_counter()``, if it has one."""
        now = now or perf_counter()
        if now >= deadline:
            fn()
            return
        self._slot(deadline, exact, now).append(fn)

    def _fire(self, key: tuple[int, int, bool], loop: asyncio.AbstractEventLoop) -> None:
        if key[2] and (early := key[1] * self._step - perf_counter()) > 0:
            loop.call_later(early, self._fire, key, loop)  # exact, and the timer fired early
            return
        for entry in self._slots.pop(key, ()):
            if isinstance(entry, asyncio.Future):
                if not entry.done():  # a cancelled waiter is skipped
                    entry.set_result(None)
                continue
            try:
                entry()
            except Exception as exc:  # one broken callback must not starve the tick's others
                loop.call_exception_handler({"message": "pacer callback failed", "exception": exc})

    def pending(self) -> int:
        """Entries not yet served (cancelled waiters included until their tick)."""
        return sum(len(s) for s in self._slots.values())
