"""bench.server_ab's profile summary: py-spy raw stacks -> shares by where the time went."""

from __future__ import annotations

import pytest

from bench.server_ab import profile_shares


def test_samples_go_to_the_category_nearest_the_leaf() -> None:
    raw = "\n".join(
        [
            # a tick writing a token: the write is the leaf, the tick above it
            "Runner.run (asyncio/runners.py:118);_Ticker._due (g.py:1);"
            "ChunkWriter.write (target_server/write_deadline.py:71) 6",
            "Runner.run (asyncio/runners.py:118);_Ticker._go (g.py:2) 3",
            "Runner.run (asyncio/runners.py:118) 1",
            "something_else (x.py:1) 0",
            "not a sample line",
        ]
    )
    shares = dict(profile_shares(raw))
    assert shares == {
        "socket write of a token event (one per event per stream)": pytest.approx(0.6),
        "the tick's per-stream step (encode, next piece, re-arm)": pytest.approx(0.3),
        "the event loop itself (epoll, timers, task steps)": pytest.approx(0.1),
    }
    assert profile_shares("") == []
