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
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from llmload.loadtests.durations import parse_span
from llmload.loadtests.measure.adapters.base import Prompt
from llmload.loadtests.workload.dataset import file_sha256
from llmload.loadtests.workload.random_dataset import RandomPrompts
from llmload.loadtests.workload.traces import MOONCAKE_BLOCK, Trace, TraceRequest

SCENARIO = "trace"
#: distinct shared blocks kept as word lists (a Mooncake block is 512 words)
_BLOCKS_KEPT = 4096


class TraceSchedule:
    """The replay's arrivals for one load-generator process: ``(index, offset)`` in time order.

    Shard ``k`` of ``n`` (distributed workers) takes requests ``k, k+n, ...``; none
    after ``limit`` requests (``--num-prompts``) or at or after ``duration``
    seconds (the phase's length).  The same contract as ``shapes.ArrivalSchedule``.
    """

    def __init__(
        self,
        offsets: Sequence[float],
        duration: float,
        shard: int = 0,
        shards: int = 1,
        limit: int | None = None,
    ) -> None:
        self.offsets = offsets
        self.duration = duration
        self.shard, self.shards = shard, shards
        self.limit = len(offsets) if limit is None else min(limit, len(offsets))
        self._n = 0

    def claim(self) -> tuple[int, float] | None:
        """The next request of this shard and its offset from the phase start, or None."""
        index = self._n * self.shards + self.shard
        if index >= self.limit or self.offsets[index] >= self.duration:
            return None
        self._n += 1
        return index, self.offsets[index]

    @property
    def claimed(self) -> int:
        """How many arrivals were handed out so far."""
        return self._n


class _Entry:
    """``for_user(index)``: the one prompt of trace request ``index`` (``next()``)."""

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
        start, end = parse_span(window) if window else (0.0, None)
        kept = [r for r in trace.requests if r.at_s >= start and (end is None or r.at_s < end)]
        if not kept:
            raise ValueError(
                f"{trace.path}: no request inside --trace-window {window} "
                f"(the trace spans 0 to {trace.span_s:g} s)"
            )
        self.trace = trace
        self.make = make
        self.seed = seed
        self.speedup = speedup
        self.window = window
        self.requests = kept
        self.offsets = [(r.at_s - start) / speedup for r in kept]
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
        self, duration: float, shard: int = 0, shards: int = 1, limit: int | None = None
    ) -> TraceSchedule:
        """This process's share of the replay's arrivals in a phase of ``duration`` seconds."""
        return TraceSchedule(self.offsets, duration, shard, shards, limit)

    def prompt(self, index: int) -> Prompt:
        """The request's prompt: its exact input length, its output length asked for exactly."""
        req = self.requests[index]
        text = self.text(req)
        return Prompt(
            scenario=SCENARIO,
            prompt_id=f"{SCENARIO}/{req.line}",
            messages=[{"role": "user", "content": text}],
            prompt=text,
            max_tokens=req.output_len,
            min_tokens=req.output_len,
        )

    def text(self, req: TraceRequest) -> str:
        """``req.input_len`` tokens: its ``hash_ids`` blocks in order, else its own words."""
        rng = random.Random(f"llmload-trace:{self.seed}:{req.line}")
        if not req.hash_ids:
            return self.make.text(req.input_len, rng)
        words: list[str] = []
        for h in req.hash_ids:
            words += self._block(h)
        words = words[: req.input_len]
        if self.make.additive:
            return " ".join(words)
        # a tokenizer that merges across words: the last block is drawn again until exact
        head = words[: (len(req.hash_ids) - 1) * MOONCAKE_BLOCK]
        return self.make.text(req.input_len, rng, head=head)

    def _block_words(self, hash_id: int) -> list[str]:
        words, leads = self.make.words
        rng = random.Random(f"llmload-trace-block:{self.seed}:{hash_id}")
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
                "input_tokens": sum(r.input_len for r in self.requests),
                "output_tokens": sum(r.output_len for r in self.requests),
                "tokenizer": self.make.codec.source,
            },
        }
