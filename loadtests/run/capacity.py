"""Capacity search: which load to try next, given what the steps so far measured.

Pure: no clock, no I/O.  The driver (``llmload.capacity.command``) runs each step as an
ordinary phase, judges it against the SLOs (``reports.capacity.judge.judge``) and
asks ``decide`` for the next load until it answers ``Done``.

A step's ``verdict`` is ``pass`` (the SLOs were met, with the stated
confidence), ``fail`` (they were not, or not demonstrably: ``uncertain``, run
once more and judged on both runs' requests) or ``unreliable``
(the load generator itself was starved, or behind its own schedule, by enough to
account for the failure: the step says nothing about the server).  ``ratio`` is
the worst observed-percentile / limit over the SLOs (1.0 = exactly at the limit);
it steers the interpolation.  ``saturated`` marks a target that stopped keeping up
(errors, queueing, the open-loop schedule slipping, throughput no longer growing
with load): nothing above it is tried.

The search, in load units (requests/s open loop, users closed loop):

1. **Bracket.**  From ``start``, grow (at most ``growth``x per step, guided by
   the ratio's trend) until a step fails; or shrink (``/growth``) until one
   passes.  A passing step that already saturates the target ends the search
   there ("saturated"), as does a ceiling (``maximum``, or a load at which the
   load generator could not judge twice: an unreliable step is run once more first).
2. **Narrow.**  Between the highest pass ``lo`` and the lowest failure ``hi``,
   try where the ratio interpolates to 1 (regula falsi), kept inside the middle
   half of the bracket so each step removes at least a quarter of it.
3. **Stop** when ``hi - lo <= tolerance * hi`` (users: ``hi - lo <= 1``), when
   the next step would not fit in the time left, or after ``max_steps``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

PASS, FAIL, UNRELIABLE = "pass", "fail", "unreliable"
#: the ratio given to a step whose samples could not be ranked at all (e.g. all failed)
RATIO_CAP = 10.0


@dataclass(frozen=True)
class Step:
    """What one step measured, as far as the search needs it."""

    load: float
    verdict: str
    ratio: float | None = None
    saturated: bool = False
    #: a failure only because the SLO could not be shown with confidence (too close to call)
    uncertain: bool = False


@dataclass(frozen=True)
class SearchConfig:
    """Where to start, what is allowed, when to stop."""

    start: float
    minimum: float
    maximum: float | None = None
    #: stop when the bracket is narrower than this share of its upper end
    tolerance: float = 0.1
    #: loads are whole numbers (users): a bracket of width 1 is as narrow as it gets
    integer: bool = False
    growth: float = 2.0
    max_steps: int = 24

    def __post_init__(self) -> None:
        if self.minimum <= 0 or self.start < self.minimum:
            raise ValueError("capacity search: need 0 < minimum <= start")
        if self.maximum is not None and self.maximum < self.start:
            raise ValueError("capacity search: maximum must be >= start")
        if not 0 < self.tolerance < 1 or self.growth <= 1:
            raise ValueError("capacity search: need 0 < tolerance < 1 and growth > 1")


@dataclass(frozen=True)
class Next:
    """Run a step at ``load``."""

    load: float
    why: str


@dataclass(frozen=True)
class Done:
    """Stop: ``reason`` is one of converged, budget, max_steps, saturated, maximum,
    harness, below_minimum, no_pass."""

    reason: str
    why: str


@dataclass(frozen=True)
class Answer:
    """The capacity: sustained ``lo`` (None: not even the lowest load), failed at ``hi``."""

    lo: float | None
    hi: float | None
    estimate: float | None
    reason: str
    lo_ratio: float | None = None
    hi_ratio: float | None = None


def _judged(steps: Sequence[Step]) -> list[Step]:
    """The passes and failures, the latest at each load (a rerun's verdict replaces the first)."""
    latest = {s.load: s for s in steps if s.verdict in (PASS, FAIL)}
    return list(latest.values())


def bracket(steps: Sequence[Step]) -> tuple[Step | None, Step | None]:
    """``(lo, hi)``: the lowest failing step, and the highest passing step below it."""
    judged = _judged(steps)
    fails = [s for s in judged if s.verdict == FAIL]
    hi = min(fails, key=lambda s: s.load) if fails else None
    passes = [s for s in judged if s.verdict == PASS and (hi is None or s.load < hi.load)]
    lo = max(passes, key=lambda s: s.load) if passes else None
    return lo, hi


def crossing(lo: float, lo_ratio: float | None, hi: float, hi_ratio: float | None) -> float:
    """Where the ratio reaches 1 between ``lo`` and ``hi`` (linear); the middle when unknown."""
    if lo_ratio is None or hi_ratio is None or not hi_ratio > lo_ratio:
        return (lo + hi) / 2
    r_lo, r_hi = min(lo_ratio, RATIO_CAP), min(hi_ratio, RATIO_CAP)
    x = lo + (1.0 - r_lo) * (hi - lo) / (r_hi - r_lo)
    return min(hi, max(lo, x))


def _starved_count(steps: Sequence[Step], load: float) -> int:
    return sum(s.load == load and s.verdict == UNRELIABLE for s in steps)


def _ceiling(cfg: SearchConfig, steps: Sequence[Step]) -> tuple[float | None, str]:
    """The highest load the search may try, and why (maximum, or a harness starved twice)."""
    starved = [s.load for s in steps if _starved_count(steps, s.load) >= 2]
    if starved and (cfg.maximum is None or min(starved) <= cfg.maximum):
        return min(starved), "harness"
    return cfg.maximum, "maximum"


def _round(cfg: SearchConfig, x: float) -> float:
    return float(max(1, round(x))) if cfg.integer else float(f"{x:.3g}")


def converged(cfg: SearchConfig, lo: float, hi: float) -> bool:
    """Is the bracket ``[lo, hi]`` as narrow as asked?"""
    if cfg.integer and hi - lo <= 1:
        return True
    return hi - lo <= cfg.tolerance * hi


def _grow(cfg: SearchConfig, steps: Sequence[Step], top: Step) -> float:
    """The next load above the highest pass: towards ratio 1 along the trend, at most x growth."""
    below = [s for s in steps if s.verdict == PASS and s.load < top.load and s.ratio is not None]
    target = top.load * cfg.growth
    if below and top.ratio is not None:
        prev = max(below, key=lambda s: s.load)
        assert prev.ratio is not None
        slope = (top.ratio - prev.ratio) / (top.load - prev.load)
        if slope > 0:
            target = min(target, top.load + (1.0 - top.ratio) / slope)
    # at least a quarter up (or one user), so a flat ratio cannot stall the search
    floor = top.load + 1 if cfg.integer else top.load * 1.25
    return max(target, floor)


def decide(
    cfg: SearchConfig,
    steps: Sequence[Step],
    time_left_s: float = math.inf,
    cost_s: Callable[[float], float] = lambda load: 0.0,
) -> Next | Done:
    """The next step, or why the search is over.  ``cost_s(load)``: how long a step would take."""
    if len(steps) >= cfg.max_steps:
        return Done("max_steps", f"{len(steps)} steps, the most allowed")
    step = _propose(cfg, steps)
    if isinstance(step, Next) and cost_s(step.load) > time_left_s:
        return Done(
            "budget",
            f"a step at {step.load:g} ({cost_s(step.load):.0f} s) does not fit in the "
            f"{max(0.0, time_left_s):.0f} s left",
        )
    return step


def _propose(cfg: SearchConfig, steps: Sequence[Step]) -> Next | Done:
    if not steps:
        return Next(_round(cfg, cfg.start), "first step")
    last = steps[-1]
    if last.verdict == UNRELIABLE and _starved_count(steps, last.load) == 1:
        return Next(
            last.load, "again: the load generator (starved or behind) could not judge the last step"
        )
    judged_here = sum(s.load == last.load and s.verdict in (PASS, FAIL) for s in steps)
    if last.verdict == FAIL and last.uncertain and judged_here == 1:
        return Next(last.load, "again: too close to call, more requests")
    lo, hi = bracket(steps)
    ceiling, ceiling_why = _ceiling(cfg, steps)
    if lo is not None and lo.saturated:
        return Done("saturated", f"the target saturated at {lo.load:g} while still within the SLO")
    if hi is None and lo is None:
        if ceiling is not None and ceiling <= cfg.minimum:
            return Done("harness", "the load generator could not keep up at the lowest load")
        below = ceiling / cfg.growth if ceiling is not None else cfg.minimum
        return Next(
            _round(cfg, max(cfg.minimum, below)), "below the load the client could not judge"
        )
    if hi is None:
        assert lo is not None
        if ceiling is not None and lo.load >= ceiling:
            return Done(ceiling_why, f"the SLO holds at the ceiling {ceiling:g}")
        nxt = _round(cfg, _grow(cfg, steps, lo))  # rounded first: 12.66 must not become 12.7
        if ceiling is not None and nxt >= ceiling:
            if ceiling_why == "maximum":
                nxt = ceiling
            elif converged(cfg, lo.load, ceiling):
                return Done("harness", f"the load generator could not keep up at {ceiling:g}")
            else:
                nxt = (lo.load + ceiling) / 2
        return _next(cfg, steps, nxt, "growing to find a failing load")
    if lo is None:
        if hi.load <= cfg.minimum:
            return Done("below_minimum", f"the SLO fails even at the lowest load {hi.load:g}")
        return _next(cfg, steps, max(cfg.minimum, hi.load / cfg.growth), "shrinking to find a pass")
    if converged(cfg, lo.load, hi.load):
        return Done("converged", f"bracket {lo.load:g}..{hi.load:g} within the tolerance")
    width = hi.load - lo.load
    x = crossing(lo.load, lo.ratio, hi.load, None if hi.saturated else hi.ratio)
    x = min(hi.load - width / 4, max(lo.load + width / 4, x))
    if ceiling_why == "harness" and ceiling is not None and lo.load < ceiling <= _round(cfg, x):
        # the load generator cannot measure at the ceiling: narrow below it, or stop
        if converged(cfg, lo.load, ceiling):
            return Done("harness", f"the load generator could not keep up at {ceiling:g}")
        x = (lo.load + ceiling) / 2
    return _next(cfg, steps, x, "narrowing the bracket")


def _next(cfg: SearchConfig, steps: Sequence[Step], x: float, why: str) -> Next | Done:
    """``x`` rounded; for whole loads, moved off loads already tried inside the bracket."""
    load = _round(cfg, x)
    lo, hi = bracket(steps)
    if cfg.integer and lo is not None and hi is not None:
        load = min(hi.load - 1, max(lo.load + 1, load))
    return Next(load, why)


def answer(cfg: SearchConfig, steps: Sequence[Step], reason: str) -> Answer:
    """The capacity the steps support: highest pass, lowest failure, interpolated estimate."""
    lo, hi = bracket(steps)
    if lo is None:
        return Answer(None, hi.load if hi else None, None, reason, None, hi.ratio if hi else None)
    if hi is None:
        return Answer(lo.load, None, lo.load, reason, lo.ratio, None)
    if cfg.integer or hi.saturated or lo.ratio is None or hi.ratio is None:
        # whole users: the most that passed; a saturated failure has no ratio to
        # interpolate with: claim only what passed
        estimate = lo.load
    else:
        estimate = crossing(lo.load, lo.ratio, hi.load, hi.ratio)
    return Answer(lo.load, hi.load, estimate, reason, lo.ratio, hi.ratio)
