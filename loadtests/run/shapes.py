"""Load shapes: closed-loop user counts over a phase, and open-loop arrival schedules.

Closed-loop shapes are pure: ``at(t)`` returns ``(users, spawn_rate)`` at ``t``
seconds into a phase, or None when the phase is over — exactly a locust
``LoadTestShape.tick()``, and ``locust_shape(shape)`` wraps one as such for a
plain ``locust -f`` run.  The runner polls one per phase; every phase of a run
gets the same shape.  (This module does not import locust: importing locust
monkey-patches the process.)

Spec strings (``--shape``) and plan tables (``[shape]``):

* ``constant`` — ``--users`` for the whole phase (the default);
* ``steps:start=5,step=5,every=30s[,max=50]`` — add ``step`` users every ``every``;
* ``spike:base=10,peak=100,at=30s,length=10s`` — ``peak`` users from ``at`` for ``length``.

Open loop (``--rate``): ``ArrivalSchedule`` yields intended send times,
Poisson (exponential gaps) or constant, from a seeded generator, until the
phase's duration or its request budget (``--num-prompts``) is used up.
"""

from __future__ import annotations

import math
import random
from typing import Any

from llmload.loadtests.durations import parse_duration


class PhaseShape:
    """A shape bounded by the phase duration; subclasses define ``users_at(t)``."""

    kind = "shape"

    def __init__(self, duration: float, spawn_rate: float) -> None:
        self.duration = duration
        self.spawn_rate = spawn_rate

    def users_at(self, t: float) -> int:
        """Users wanted ``t`` seconds into the phase."""
        raise TypeError(f"{type(self).__name__} must define users_at")

    def at(self, t: float) -> tuple[int, float] | None:
        """``(users, spawn_rate)`` at ``t`` seconds, or None once the phase is over."""
        if t >= self.duration:
            return None
        return self.users_at(t), self.spawn_rate

    def describe(self) -> dict[str, Any]:
        """JSON-able parameters for ``run.json``."""
        return {"kind": self.kind, **vars(self)}


def locust_shape(shape: PhaseShape) -> Any:
    """``shape`` as a locust ``LoadTestShape`` instance (imports locust, which patches)."""
    from locust import LoadTestShape

    class _Shape(LoadTestShape):
        def tick(self) -> tuple[int, float] | None:
            return shape.at(self.get_run_time())

    return _Shape()


class Constant(PhaseShape):
    """The same number of users for the whole phase."""

    kind = "constant"

    def __init__(self, users: int, duration: float, spawn_rate: float) -> None:
        super().__init__(duration, spawn_rate)
        self.users = users

    def users_at(self, t: float) -> int:
        return self.users


class Steps(PhaseShape):
    """Start with ``start`` users and add ``step`` every ``every`` seconds, up to ``max``."""

    kind = "steps"

    def __init__(
        self,
        start: int,
        step: int,
        every: float,
        duration: float,
        spawn_rate: float,
        max: int | None = None,  # the spec's own word
    ) -> None:
        super().__init__(duration, spawn_rate)
        if every <= 0 or start < 0 or step < 0:
            raise ValueError("steps: every must be > 0, start and step >= 0")
        self.start, self.step, self.every, self.max = start, step, every, max

    def users_at(self, t: float) -> int:
        n = self.start + self.step * int(t // self.every)
        return max(1, n if self.max is None else min(n, self.max))


class Spike(PhaseShape):
    """``base`` users, ``peak`` users from ``at`` for ``length`` seconds, then ``base`` again."""

    kind = "spike"

    def __init__(
        self, base: int, peak: int, at: float, length: float, duration: float, spawn_rate: float
    ) -> None:
        super().__init__(duration, spawn_rate)
        if base < 1 or peak < base or length <= 0:
            raise ValueError("spike: need 1 <= base <= peak and length > 0")
        self.base, self.peak, self.start_at, self.length = base, peak, at, length

    def users_at(self, t: float) -> int:
        return self.peak if self.start_at <= t < self.start_at + self.length else self.base


_INT_KEYS = {"start", "step", "max", "base", "peak"}
_DURATION_KEYS = {"every", "at", "length"}


def _spec_params(spec: str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if isinstance(spec, dict):
        params = {k.replace("-", "_"): v for k, v in spec.items()}
        return str(params.pop("kind", "constant")), params
    kind, _, rest = spec.partition(":")
    params = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--shape: expected key=value, got {item!r}")
        params[key.strip()] = value.strip()
    return kind.strip(), params


def make_shape(
    spec: str | dict[str, Any] | None, *, users: int, spawn_rate: float, duration: float
) -> PhaseShape:
    """Build the phase shape from ``--shape`` (None means constant ``--users``)."""
    if not spec:
        return Constant(users, duration, spawn_rate)
    kind, raw = _spec_params(spec)
    params: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _INT_KEYS:
            params[key] = int(value)
        elif key in _DURATION_KEYS:
            params[key] = parse_duration(value)
        else:
            raise ValueError(f"--shape {kind}: unknown parameter {key!r}")
    try:
        if kind == "constant":
            return Constant(users, duration, spawn_rate)
        if kind == "steps":
            return Steps(duration=duration, spawn_rate=spawn_rate, **params)
        if kind == "spike":
            return Spike(duration=duration, spawn_rate=spawn_rate, **params)
    except TypeError as exc:
        raise ValueError(f"--shape {kind}: {exc}") from None
    raise ValueError(f"--shape: unknown kind {kind!r} (constant, steps, spike)")


class ArrivalSchedule:
    """Open-loop intended send times (seconds from the phase start), seeded.

    ``claim()`` hands out the next arrival to whichever user is free; when all
    users are busy the arrival is claimed late, and the lateness is the
    request's schedule delay.  ``index`` is global across ``shards`` (workers):
    shard ``k`` of ``n`` owns indices ``k, k+n, k+2n, ...``.
    """

    def __init__(
        self,
        rate: float,
        arrival: str,
        seed: int,
        duration: float,
        shard: int = 0,
        shards: int = 1,
        limit: int | None = None,
    ) -> None:
        if arrival not in ("poisson", "constant"):
            raise ValueError(f"unknown arrival process {arrival!r}")
        self.rate = rate / shards
        self.arrival = arrival
        self.duration = duration
        self.shard, self.shards = shard, shards
        #: global arrivals in the phase (all shards); None: as many as the duration holds
        self.limit = limit
        self._rng = random.Random(f"{seed}:{shard}")
        self._n = 0
        self._next = self._gap() if arrival == "poisson" else shard / rate

    def _gap(self) -> float:
        return self._rng.expovariate(self.rate)

    def claim(self) -> tuple[int, float] | None:
        """``(global index, intended offset)`` of the next arrival; None once the phase is over."""
        index = self._n * self.shards + self.shard
        if self._next >= self.duration or (self.limit is not None and index >= self.limit):
            return None
        at = self._next
        self._n += 1
        self._next += self._gap() if self.arrival == "poisson" else 1.0 / self.rate
        return index, at

    @property
    def claimed(self) -> int:
        """How many arrivals were handed out so far."""
        return self._n


def first_start_offset(
    seed: int, user: int, pacing: float, spawn_window: float = 0.0, batch: int = 0
) -> float:
    """Closed loop: seconds user ``user`` waits before its first request (``--first-start spread``).

    A seeded draw inside one pacing interval, seeded by the run's seed and the
    user's run-wide number (the same users start at the same offsets in a rerun and
    in any worker).  Users spawned together would otherwise send in lock-step
    bursts of ``--users`` requests every interval for the whole run: a server sees
    a burst, not the steady rate ``users / pacing``.  Back-to-back users (pacing 0)
    have no interval: they spread over ``spawn_window`` instead (``spawn_window``:
    locust starts a batch of ``--spawn-rate`` users at one instant each second, and
    back to back their requests would stay in waves of a batch each).

    ``batch``: how many users locust spawns at one instant (``spawn_batch``).  Given,
    the interval is cut into that many equal slots and user ``u`` draws its point
    inside slot ``u % batch``: a batch covers the interval evenly (independent
    uniform points crowd 6 of 20 users into one 100 ms of a second by chance).
    Without it the point is uniform over the whole interval.
    """
    interval = pacing if pacing > 0 else spawn_window
    if interval <= 0:
        return 0.0
    draw = random.Random(f"first-start:{seed}:{user}").random()
    if batch > 1:
        return (user % batch + draw) / batch * interval
    return draw * interval


def spawn_batch(users: int, spawn_rate: float) -> int:
    """How many users locust starts at one instant: ``floor(--spawn-rate)`` (at least one)
    each dispatch, and never more than ``--users``."""
    return max(1, min(users, math.floor(spawn_rate)))


def spawn_window(users: int, spawn_rate: float) -> float:
    """The time one batch of spawned users is meant to fill: locust starts ``floor(rate)``
    users at once every second, which at ``--spawn-rate`` users per second is a second
    (or ``users / rate`` when fewer are spawned); one user at a time has no batch."""
    if spawn_rate < 2 or users < 2:
        return 0.0
    return min(1.0, users / spawn_rate)
