"""Load shapes and open-loop arrival schedules (pure, no clock)."""

from __future__ import annotations

import statistics

import pytest

from llmload.loadtests.run.shapes import ArrivalSchedule, Constant, Spike, Steps, make_shape


def test_constant_until_the_phase_ends() -> None:
    shape = make_shape(None, users=20, spawn_rate=5, duration=60)
    assert isinstance(shape, Constant)
    assert shape.at(0) == (20, 5) and shape.at(59.9) == (20, 5)
    assert shape.at(60) is None


def test_steps_add_users_every_interval_up_to_max() -> None:
    shape = make_shape(
        "steps:start=5,step=5,every=30s,max=12", users=1, spawn_rate=10, duration=120
    )
    assert isinstance(shape, Steps)
    assert [shape.at(t)[0] for t in (0, 29, 30, 59, 60, 119)] == [5, 5, 10, 10, 12, 12]
    assert max(shape.at(t / 10)[0] for t in range(1200)) == 12 and shape.at(120) is None


def test_spike_from_a_plan_table() -> None:
    spec = {"kind": "spike", "base": 2, "peak": 50, "at": "10s", "length": "5s"}
    shape = make_shape(spec, users=1, spawn_rate=100, duration=30)
    assert isinstance(shape, Spike)
    assert [shape.at(t)[0] for t in (0, 9.9, 10, 14.9, 15, 29)] == [2, 2, 50, 50, 2, 2]
    assert shape.describe()["kind"] == "spike"


@pytest.mark.parametrize(
    "spec",
    [
        "zigzag",
        "steps:start=5,step",
        "steps:start=5,bogus=1",
        "spike:base=10,peak=5,at=1s,length=1s",
    ],
)
def test_bad_specs_are_one_line_errors(spec: str) -> None:
    with pytest.raises(ValueError):
        make_shape(spec, users=1, spawn_rate=1, duration=10)


def test_constant_arrivals_are_evenly_spaced_and_bounded() -> None:
    sched = ArrivalSchedule(rate=4, arrival="constant", seed=0, duration=2.0)
    slots = []
    while (slot := sched.claim()) is not None:
        slots.append(slot)
    assert [i for i, _ in slots] == list(range(8))
    assert [round(t, 6) for _, t in slots] == [i * 0.25 for i in range(8)]
    assert sched.claim() is None and sched.claimed == 8


def test_poisson_arrivals_are_seeded_with_the_right_mean_gap() -> None:
    def times(seed: int) -> list[float]:
        sched = ArrivalSchedule(rate=50, arrival="poisson", seed=seed, duration=200.0)
        out = []
        while (slot := sched.claim()) is not None:
            out.append(slot[1])
        return out

    a, b, c = times(1), times(1), times(2)
    assert a == b and a != c
    gaps = [y - x for x, y in zip(a, a[1:], strict=False)]
    assert statistics.mean(gaps) == pytest.approx(1 / 50, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(1 / 50, rel=0.1)  # exponential: sd == mean


def test_shards_split_the_rate_and_interleave_indices() -> None:
    shards = [ArrivalSchedule(10, "constant", 0, 1.0, shard=k, shards=2) for k in range(2)]
    got = []
    for sched in shards:
        while (slot := sched.claim()) is not None:
            got.append(slot)
    assert sorted(i for i, _ in got) == list(range(10))
    assert sorted(round(t, 6) for _, t in got) == [round(i * 0.1, 6) for i in range(10)]
