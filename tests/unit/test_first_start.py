"""Closed loop: users' first requests spread over one pacing interval (--first-start)."""

from __future__ import annotations

import pytest

from loadtests.plan import build_options
from loadtests.shapes import first_start_offset


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


def test_back_to_back_users_start_at_once() -> None:
    assert first_start_offset(0, 5, 0.0) == 0.0


def test_the_option_defaults_to_spread_and_is_checked() -> None:
    assert build_options({}, {}).first_start == "spread"
    assert build_options({}, {"first_start": "together"}).first_start == "together"
    with pytest.raises(ValueError, match="--first-start"):
        build_options({}, {"first_start": "sometimes"})
