"""llmload.target_server.pacer: many deadlines on one timer per tick, exact ones never early."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import perf_counter

import pytest

from llmload.target_server.pacer import Pacer


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
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors and not any(t.is_alive() for t in threads)
    assert perf_counter() >= deadline and pacer.pending() == 0


def test_callbacks_run_in_their_tick_exact_never_early_and_a_failing_one_spares_the_rest() -> None:
    async def main() -> tuple[list[float], list[str], Pacer]:
        pacer = Pacer(tick=0.002)
        base = perf_counter() + 0.02
        early: list[float] = []
        failures: list[str] = []
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, ctx: failures.append(ctx["message"])
        )

        def boom() -> None:
            raise RuntimeError("a broken stream")

        pacer.call_at(base, boom, exact=True)

        def stamp(d: float) -> Callable[[], None]:
            return lambda: early.append(d - perf_counter())

        for i in range(100):
            d = base + (i % 4) * 0.0005
            pacer.call_at(d, stamp(d), exact=True)
        now: list[bool] = []
        pacer.call_at(perf_counter() - 1, lambda: now.append(True))  # due: runs at once
        assert now == [True]
        while pacer.pending():
            await asyncio.sleep(0.005)
        return early, failures, pacer

    early, failures, pacer = asyncio.run(main())
    assert len(early) == 100 and max(early) <= 0  # every callback ran, none before its deadline
    assert failures == ["pacer callback failed"]
    assert pacer.timers < 20  # one timer per tick, not one per callback


def test_exact_deadlines_are_not_held_to_the_coarse_tick() -> None:
    """A first token waits for a step of the finer grid, not for the next whole tick."""

    async def main() -> list[float]:
        pacer = Pacer(tick=0.02)  # a coarse tick: rounding up to it would cost ~10 ms each
        late: list[float] = []
        for i in range(10):
            d = perf_counter() + 0.005 + i * 0.0013
            await pacer.until(d, exact=True)
            late.append(perf_counter() - d)
        return late

    late = sorted(asyncio.run(main()))
    assert late[0] >= 0 and late[len(late) // 2] < 0.005  # median well under half a tick
