"""A run's phases as every load-generator process sees them (no locust here: unit tests and
the planners import it without patching the process)."""

from __future__ import annotations

from dataclasses import dataclass

from llmload.loadtests.measure.record import Mode

#: which target a phase runs against: the run's own, or ``--baseline-target``
RUN, BASELINE = "run", "baseline"
#: a ``--baseline-target`` phase is its run twin's name with this in front
BASELINE_PREFIX = "baseline-"


@dataclass(frozen=True)
class Phase:
    """One phase of a run, as every load-generator process sees it."""

    name: str
    mode: Mode
    duration: float
    warmup: bool = False
    #: requests in the phase, all processes together (``--num-prompts``); None: by duration
    requests: int | None = None
    #: a load of the phase's own (the steps of a capacity search); None: the run's
    users: int | None = None
    rate: float | None = None
    #: arrivals at a trace's times (``--dataset trace``): an open loop without ``rate``
    timed: bool = False
    #: a replay's pace of the phase's own (the steps of a capacity search over a trace):
    #: the window in laps at this speedup for the phase's length; None: once, at --speedup
    speedup: float | None = None
    #: the round of prompts the phase draws, so that no phase finds another's in a prefix
    #: cache: 0 the run's own (every measured phase of ``llmload run`` sends the same
    #: prompts); a capacity search numbers its warm-up's and steps' laps on.  A trace
    #: replay: the lap it starts at (its texts; a step may take several laps).  Otherwise
    #: open-loop arrivals are seeded with the lap, and closed-loop users carry their
    #: sequences on from phase to phase (``LoadContext.user_prompts``, ``arrival_prompts``)
    lap: int = 0
    #: ``RUN`` (``--target``) or ``BASELINE`` (``--baseline-target``)
    target: str = RUN

    def load(self, users: int, rate: float | None) -> tuple[int, float | None]:
        """``(users, rate)`` of this phase, given the run's ``--users`` and ``--rate``."""
        return (
            self.users if self.users is not None else users,
            self.rate if self.rate is not None else rate,
        )


def shard_share(total: int | None, shard: int, shards: int) -> int | None:
    """Shard ``shard``'s part of ``total`` requests: the parts differ by at most one."""
    if total is None:
        return None
    return total // shards + (1 if shard < total % shards else 0)
