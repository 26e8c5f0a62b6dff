"""Closed loop: users' first requests spread over one pacing interval (--first-start)."""

from __future__ import annotations

import pytest

from llmload.loadtests.options import build_options
from llmload.loadtests.run.shapes import first_start_offset, spawn_batch, spawn_window


def test_offsets_are_seeded_inside_one_interval_and_spread() -> None:
    offsets = [first_start_offset(7, user, 3.0) for user in range(400)]
    assert all(0.0 <= o < 3.0 for o in offsets)
    assert offsets == [first_start_offset(7, user, 3.0) for user in range(400)]  # a rerun
    assert offsets != [first_start_offset(8, user, 3.0) for user in range(400)]  # another seed
    # uniform: each third of the interval holds about a third of the users
    thirds = [sum(1 for o in offsets if k <= o < k + 1) for k in range(3)]
    assert all(90 <= n <= 180 for n in thirds), thirds
    # no lock-step: 20 users spawned together do not all send within one 50 ms window
    twenty = sorted(first_start_offset(0, user, 3.0) for user in range(20))
    assert max(b - a for a, b in zip(twenty, twenty[1:], strict=False)) > 0.05
    assert twenty[-1] - twenty[0] > 1.0


def test_back_to_back_users_spread_over_their_spawn_batch() -> None:
    # locust starts floor(spawn rate) users at one instant each second: back to back
    # (pacing 0) they would stay in waves of a batch, so they spread over that second
    assert spawn_window(1000, 1000.0) == 1.0
    assert spawn_window(1000, 100.0) == 1.0  # ten batches of 100, each over its second
    assert spawn_window(20, 1000.0) == pytest.approx(0.02)  # 20 users at 1,000/s: 20 ms
    assert spawn_window(50, 1.0) == 0.0 and spawn_window(1, 20.0) == 0.0  # no batch
    offsets = [first_start_offset(3, user, 0.0, spawn_window(1000, 1000.0)) for user in range(1000)]
    assert all(0.0 <= o < 1.0 for o in offsets)
    assert all(200 <= sum(1 for o in offsets if k / 4 <= o < (k + 1) / 4) <= 300 for k in range(4))
    assert first_start_offset(0, 5, 0.0) == 0.0  # no window given: at once


def test_the_option_defaults_to_spread_and_is_checked() -> None:
    assert build_options({}, {}).load.first_start == "spread"
    assert build_options({}, {"first_start": "together"}).load.first_start == "together"
    with pytest.raises(ValueError, match="--first-start"):
        build_options({}, {"first_start": "sometimes"})


def test_a_spawn_batch_covers_the_interval_evenly() -> None:
    assert spawn_batch(20, 20.0) == 20 and spawn_batch(1000, 100.0) == 100
    assert spawn_batch(5, 0.5) == 1 and spawn_batch(3, 50.0) == 3
    for users, pacing in ((20, 3.0), (20, 1.0), (7, 2.0)):
        offsets = sorted(first_start_offset(4, u, pacing, batch=users) for u in range(users))
        # user u draws inside the u-th of ``users`` equal slots of the interval
        slot = pacing / users
        assert [int(o // slot) for o in offsets] == list(range(users))
        # so no window of one slot holds more than two users (uniform draws: up to 6 of 20)
        assert all(b - a > 0 for a, b in zip(offsets, offsets[1:], strict=False))
        assert max(sum(1 for o in offsets if a <= o < a + slot) for a in offsets) <= 2
    # a second batch (user numbers 100..199 of batches of 100) covers the interval again
    second = [first_start_offset(0, u, 3.0, batch=100) for u in range(100, 200)]
    assert sorted(int(o // 0.03) for o in second) == list(range(100))
    # without a batch the old uniform draw, unchanged
    assert first_start_offset(7, 3, 3.0) == first_start_offset(7, 3, 3.0, batch=1)
