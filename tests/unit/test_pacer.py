"""target_server.pacer: many deadlines on one timer per tick, exact ones never early."""

from __future__ import annotations

import asyncio
from time import perf_counter

import pytest

from target_server.pacer import Pacer


def test_exact_waits_are_never_early_and_share_timers() -> None:
    async def main() -> tuple[list[float], Pacer]:
        pacer = Pacer(tick=0.002)
        base = perf_counter() + 0.02
        deadlines = [base + (i % 5) * 0.0004 for i in range(200)]  # 200 waiters, a few ticks
        early: list[float] = []

        async def one(d: float) -> None:
            await pacer.until(d, exact=True)
            early.append(d - perf_counter())

        await asyncio.gather(*(one(d) for d in deadlines))
        return early, pacer

    early, pacer = asyncio.run(main())
    assert len(early) == 200 and max(early) <= 0  # nobody woke before their deadline
    assert pacer.timers < 20  # one timer per tick (and re-arms), not one per waiter
    assert pacer.pending() == 0


def test_nearest_tick_keeps_the_mean_and_past_deadlines_return_at_once() -> None:
    async def main() -> list[float]:
        pacer = Pacer(tick=0.001)
        await pacer.until(perf_counter() - 1)  # already due: no timer
        assert pacer.timers == 0
        start = perf_counter() + 0.01
        errs = []
        for i in range(40):
            d = start + i * 0.0037
            await pacer.until(d)
            errs.append(perf_counter() - d)
        return errs

    errs = asyncio.run(main())
    # within half a tick of the grid plus timer/scheduling noise (generous: a busy machine)
    assert min(errs) > -0.0025
    assert sorted(errs)[len(errs) // 2] < 0.05


def test_a_cancelled_waiter_does_not_break_its_tick() -> None:
    async def main() -> bool:
        pacer = Pacer(tick=0.002)
        d = perf_counter() + 0.02
        victim = asyncio.ensure_future(pacer.until(d, exact=True))
        other = asyncio.ensure_future(pacer.until(d, exact=True))
        await asyncio.sleep(0)
        victim.cancel()
        await other
        return victim.cancelled()

    assert asyncio.run(main())


def test_tick_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Pacer(tick=0)


def test_one_pacer_serves_two_event_loops_at_once() -> None:
    import threading

    pacer = Pacer(tick=0.002)
    deadline = perf_counter() + 0.05  # the same tick on both loops
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(pacer.until(deadline, exact=True))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors and not any(t.is_alive() for t in threads)
    assert perf_counter() >= deadline and pacer.pending() == 0
