"""``--dataset trace FILE``: a production trace replayed at its own times, lengths honoured.

Request ``i`` of the replay is the trace's ``i``-th request in time order (inside
``--trace-window START:END``, trace seconds from its first request), due
``(at - START) / --speedup`` seconds into the phase: an open loop whose arrivals
are the trace's (``arrivals``; ``--users`` caps the requests in flight, and a
request sent late records its schedule delay, so latency from the intended send
time is reported as for ``--rate``).

Its prompt has exactly the trace's input length and asks for exactly its output
length (``max_tokens`` = ``min_tokens``), in the target's tokenizer
(``--tokenizer``, else the embedded model's), made of vocabulary words as
``--dataset random`` makes them (``random_dataset.RandomPrompts``).  A Mooncake
trace's ``hash_ids`` become shared text: each id is one seeded block of
``MOONCAKE_BLOCK`` words, the same for every request that names it, so requests
the trace says share a prefix share it here and a prefix cache sees the reuse
the trace recorded.  Without ``hash_ids`` every prompt is its own.  The same
``--seed`` gives the same texts; a prompt is made when its request is claimed,
from the trace line and the seed alone (every worker of a distributed run makes
the same one).

A capacity search over the replay's pace (``llmload capacity --speedup``) replays
the window at each step's own speedup (``arrivals(..., speedup=X)``): from its
start, and again from its start as long as the step lasts (``Pace``: each lap one
mean gap after the last request of the lap before; a lap after the first has texts
of its own, seeded by the lap, so a prefix cache sees each lap's reuse as the trace
recorded it and not the earlier lap's prompts again).  ``llmload run``'s warm-up replays
lap 1 (texts of its own), so its measured phases, lap 0, do not find theirs cached.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from llmload.loadtests.durations import parse_span
from llmload.loadtests.measure.adapters.base import Prompt
from llmload.loadtests.workload.dataset import file_sha256
from llmload.loadtests.workload.random_dataset import RandomPrompts
from llmload.loadtests.workload.sampler import lap_salt
from llmload.loadtests.workload.traces import MOONCAKE_BLOCK, Trace, TraceRequest

SCENARIO = "trace"
#: distinct shared blocks kept as word lists (a Mooncake block is 512 words)
_BLOCKS_KEPT = 4096


@dataclass(frozen=True)
class Pace:
    """A window's arrivals at speedup 1: seconds from the window's start, in time order.

    Replayed in laps (a capacity step longer than the window), request ``j`` of lap
    ``k`` is due at ``k * period + offsets[j]``: each lap starts one mean gap between
    the window's requests after the last request of the lap before.  ``period`` is
    None when the window has no pace of its own (one request, or all at one time).
    """

    offsets: tuple[float, ...]

    @property
    def period(self) -> float | None:
        """Seconds (at speedup 1) from one lap's start to the next's."""
        n = len(self.offsets)
        if n < 2 or self.offsets[-1] <= self.offsets[0]:
            return None
        return self.offsets[-1] + (self.offsets[-1] - self.offsets[0]) / (n - 1)

    @property
    def rate(self) -> float | None:
        """The window's requests per second at speedup 1, lap after lap."""
        period = self.period
        return None if period is None else len(self.offsets) / period

    def at(self, index: int, speedup: float) -> float:
        """When arrival ``index`` of the laps is due, in seconds from the start, at ``speedup``."""
        period = self.period
        lap, j = divmod(index, len(self.offsets))
        if lap and period is None:
            return math.inf
        return (lap * (period or 0.0) + self.offsets[j]) / speedup

    def count_before(self, seconds: float, speedup: float) -> int:
        """How many arrivals of the laps are due before ``seconds`` at ``speedup``."""
        t = seconds * speedup
        period = self.period
        if period is None:
            return bisect.bisect_left(self.offsets, t)
        laps = max(0, math.floor(t / period))
        return laps * len(self.offsets) + bisect.bisect_left(self.offsets, t - laps * period)


def window_of(trace: Trace, window: str | None) -> tuple[list[TraceRequest], Pace]:
    """The requests inside ``--trace-window START:END`` (the whole trace: None) and their pace,
    from START; ``ValueError`` when none is inside."""
    start, end = parse_span(window) if window else (0.0, None)
    kept = [r for r in trace.requests if r.at_s >= start and (end is None or r.at_s < end)]
    if not kept:
        raise ValueError(
            f"{trace.path}: no request inside --trace-window {window} "
            f"(the trace spans 0 to {trace.span_s:g} s)"
        )
    return kept, Pace(tuple(r.at_s - start for r in kept))


class TraceSchedule:
    """The replay's arrivals for one load-generator process: ``(index, offset)`` in time order.

    Shard ``k`` of ``n`` (distributed workers) takes requests ``k, k+n, ...``; none
    after ``limit`` requests (``--num-prompts``) or at or after ``duration``
    seconds (the phase's length).  The same contract as ``shapes.ArrivalSchedule``.
    With a ``period`` the offsets repeat in laps (arrival ``i`` is request
    ``i % len(offsets)`` of lap ``i // len(offsets)``, ``period`` seconds a lap) until
    the phase ends: a capacity step's replay (``Pace``).  ``first``: the global index the
    schedule's arrival 0 has (a multiple of ``len(offsets)``: the lap it starts at).
    """

    def __init__(
        self,
        offsets: Sequence[float],
        duration: float,
        shard: int = 0,
        shards: int = 1,
        limit: int | None = None,
        period: float | None = None,
        first: int = 0,
    ) -> None:
        self.offsets = offsets
        self.first = first
        self.duration = duration
        self.shard, self.shards = shard, shards
        self.period = period
        most = None if period else len(offsets)
        self.limit = most if limit is None else min(limit, most or limit)
        self._n = 0

    def _offset(self, index: int) -> float:
        if not self.period:
            return self.offsets[index]
        lap, j = divmod(index, len(self.offsets))
        return lap * self.period + self.offsets[j]

    def claim(self) -> tuple[int, float] | None:
        """The next request of this shard and its offset from the phase start, or None."""
        index = self._n * self.shards + self.shard
        if self.limit is not None and index >= self.limit:
            return None
        at = self._offset(index)
        if at >= self.duration:
            return None
        self._n += 1
        return self.first + index, at

    @property
    def claimed(self) -> int:
        """How many arrivals were handed out so far."""
        return self._n


class _Entry:
    """``for_user(index)``: the one prompt of arrival ``index`` (``next()``)."""

    __slots__ = ("replay", "index")

    def __init__(self, replay: TraceReplay, index: int) -> None:
        self.replay, self.index = replay, index

    def next(self) -> Prompt:
        return self.replay.prompt(self.index)

    def record_reply(self, text: str) -> None:
        """Single-turn: nothing to keep."""


class TraceReplay:
    """A trace as a workload: arrivals at its times, prompts of its lengths (module docstring)."""

    turns = 1

    def __init__(
        self,
        trace: Trace,
        make: RandomPrompts,
        *,
        seed: int = 0,
        speedup: float = 1.0,
        window: str | None = None,
    ) -> None:
        if speedup <= 0:
            raise ValueError("--speedup must be > 0")
        kept, pace = window_of(trace, window)
        self.trace = trace
        self.make = make
        self.seed = seed
        self.speedup = speedup
        self.window = window
        self.requests = kept
        #: the window at speedup 1, and at ``--speedup`` (what ``llmload run`` replays)
        self.pace = pace
        self.offsets = [o / speedup for o in self.pace.offsets]
        self._sha = file_sha256(trace.path)
        self._block = lru_cache(maxsize=_BLOCKS_KEPT)(self._block_words)
        make.words  # noqa: B018  (a tokenizer without word tokens fails here, before the run)

    @property
    def names(self) -> list[str]:
        return [SCENARIO]

    @property
    def count(self) -> int:
        """Requests in the replay (the window's)."""
        return len(self.requests)

    def for_user(self, index: int) -> _Entry:
        """Request ``index``'s prompt source (open loop: the arrival's global index)."""
        return _Entry(self, index)

    def arrivals(
        self,
        duration: float,
        shard: int = 0,
        shards: int = 1,
        limit: int | None = None,
        speedup: float | None = None,
        lap: int = 0,
    ) -> TraceSchedule:
        """This process's share of the replay's arrivals in a phase of ``duration`` seconds.

        ``speedup``: a pace of the phase's own (a capacity step): the window in laps at
        that speedup for as long as the phase lasts, the first of them lap ``lap`` (its
        texts); None: once, at ``--speedup``, with lap ``lap``'s texts (a warm-up's: 1).
        """
        if speedup is None:
            return TraceSchedule(
                self.offsets, duration, shard, shards, limit, first=lap * self.count
            )
        period = self.pace.period
        offsets = [o / speedup for o in self.pace.offsets]
        every = None if period is None else period / speedup
        return TraceSchedule(offsets, duration, shard, shards, limit, every, lap * self.count)

    def prompt(self, index: int) -> Prompt:
        """Arrival ``index``'s prompt: request ``index % count`` of the window, in lap
        ``index // count``; its exact input length, its output length asked for exactly."""
        lap, j = divmod(index, self.count)
        req = self.requests[j]
        text = self.text(req, lap)
        return Prompt(
            scenario=SCENARIO,
            prompt_id=f"{SCENARIO}/{req.line}" + (f"/lap{lap}" if lap else ""),
            messages=[{"role": "user", "content": text}],
            prompt=text,
            max_tokens=req.output_len,
            min_tokens=req.output_len,
        )

    def text(self, req: TraceRequest, lap: int = 0) -> str:
        """``req.input_len`` tokens: its ``hash_ids`` blocks in order, else its own words
        (a lap after the first: texts of its own, shared within the lap as in the trace)."""
        salt = lap_salt(lap)
        rng = random.Random(f"llmload-trace:{self.seed}:{req.line}{salt}")
        if not req.hash_ids:
            return self.make.text(req.input_len, rng)
        words: list[str] = []
        for h in req.hash_ids:
            words += self._block(h, lap)
        words = words[: req.input_len]
        if self.make.additive:
            return " ".join(words)
        # a tokenizer that merges across words: the last block is drawn again until exact
        head = words[: (len(req.hash_ids) - 1) * MOONCAKE_BLOCK]
        return self.make.text(req.input_len, rng, head=head)

    def _block_words(self, hash_id: int, lap: int = 0) -> list[str]:
        words, leads = self.make.words
        salt = lap_salt(lap)
        rng = random.Random(f"llmload-trace-block:{self.seed}:{hash_id}{salt}")
        return [rng.choice(leads), *rng.choices(words, k=MOONCAKE_BLOCK - 1)]

    def describe(self) -> dict[str, Any]:
        """What ``run.json`` records about the replay."""
        t = self.trace
        return {
            "scenario": SCENARIO,
            "names": self.names,
            "seed": self.seed,
            "turns": 1,
            "trace": {
                "path": str(t.path),
                "sha256": self._sha,
                "format": t.format,
                "requests": len(t.requests),
                "replayed": self.count,
                "skipped": dict(t.skipped),
                "span_s": t.span_s,
                "window": self.window,
                "speedup": self.speedup,
                "replay_s": self.offsets[-1],
                "lap_s": self.pace.period,
                "input_tokens": sum(r.input_len for r in self.requests),
                "output_tokens": sum(r.output_len for r in self.requests),
                "tokenizer": self.make.codec.source,
            },
        }
