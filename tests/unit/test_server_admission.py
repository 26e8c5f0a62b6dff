"""Admission: slot limit, FIFO hand-over, queue bound, cancellation while queued."""

from __future__ import annotations

import asyncio

import pytest

from llmload.target_server.admission import Admission, Rejected


def test_unlimited_never_waits():
    async def go():
        a = Admission(0, 0)
        for _ in range(100):
            await a.acquire()
        return a.running, a.waiting

    assert asyncio.run(go()) == (100, 0)


def test_fifo_queue_and_rejection():
    async def go():
        a = Admission(1, 2)
        await a.acquire()
        order: list[int] = []

        async def waiter(i):
            await a.acquire()
            order.append(i)

        tasks = [asyncio.create_task(waiter(i)) for i in range(2)]
        await asyncio.sleep(0)
        assert (a.running, a.waiting) == (1, 2)
        with pytest.raises(Rejected):
            await a.acquire()
        a.release()
        await asyncio.sleep(0)
        a.release()
        await asyncio.gather(*tasks)
        assert (a.running, a.waiting) == (1, 0)
        a.release()
        return order, a.running

    assert asyncio.run(go()) == ([0, 1], 0)


def test_cancelled_waiter_leaves_the_queue():
    async def go():
        a = Admission(1, 5)
        await a.acquire()
        t = asyncio.create_task(a.acquire())
        await asyncio.sleep(0)
        assert a.waiting == 1
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        assert a.waiting == 0
        a.release()
        return a.running

    assert asyncio.run(go()) == 0


def test_slot_handed_to_a_waiter_cancelled_at_that_moment_is_passed_on():
    async def go():
        a = Admission(1, 5)
        await a.acquire()
        first = asyncio.create_task(a.acquire())
        second = asyncio.create_task(a.acquire())
        await asyncio.sleep(0)
        a.release()  # the slot goes to `first`...
        first.cancel()  # ...which is cancelled before it runs
        await asyncio.gather(first, return_exceptions=True)
        await asyncio.wait_for(second, 1)
        return a.running, a.waiting

    assert asyncio.run(go()) == (1, 0)
