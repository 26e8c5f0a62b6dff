"""Harness health per phase: what the run keeps of the load generator's own samples.

Every load-generator process samples itself once a second (``loadtests.run.health``:
CPU % of one core, worst event-loop lag since the previous sample).  The live
exporter shows those as gauges; ``HealthLog`` keeps them per phase and per
process, so that ``run.json`` (and from it ``summary.json``, the reports and
the gate) can say whether the numbers were measured by a healthy client.

A sample is *saturated* when the process used at least ``CPU_LINE_PCT`` of a
core or its loop woke up ``LAG_LINE_S`` late or more: a ready greenlet (a user
about to timestamp its next SSE event) waited that long for the CPU, so every
latency measured then carries up to that much of the client's own delay.  A
process is *starved* in a phase when at least ``STARVED_SHARE`` of its samples,
and at least ``STARVED_MIN_SAMPLES`` of them, were saturated (one slow second
in a six-second phase is a hiccup, not a starved client).  The master of a
distributed run issues no requests (its lag delays forwarding, not
timestamps), so it is listed but never starves a phase.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmload.loadtests.percentile import percentile_of
from llmload.loadtests.run.sinks import HarnessHealth

#: a sample at or above this CPU use (% of one core; a gevent process uses one) is saturated
CPU_LINE_PCT = 90.0
#: ... or with its event loop this late (an idle loop wakes within a few ms even on a busy box)
LAG_LINE_S = 0.020
#: a process with at least this share of saturated samples was starved in that phase
STARVED_SHARE = 0.10
#: ... and at least this many saturated samples (seconds)
STARVED_MIN_SAMPLES = 3
#: processes that only forward and aggregate: listed, never counted as starving a phase
NOT_LOAD = frozenset({"master"})


def saturated(snap: HarnessHealth) -> bool:
    """Is this one sample above the saturation line?"""
    return snap.cpu_percent >= CPU_LINE_PCT or snap.loop_lag_s >= LAG_LINE_S


def process_summary(snaps: list[HarnessHealth]) -> dict[str, Any]:
    """CPU p50/max, loop lag p99/max (ms), the saturated share of one process's samples and
    its host's CPU steal (mean and max %, ``HarnessHealth.steal_percent``)."""
    if not snaps:
        return {"samples": 0}
    cpu = [s.cpu_percent for s in snaps]
    lag = [s.loop_lag_s * 1000.0 for s in snaps]
    return {
        "samples": len(snaps),
        "cpu_p50": round(percentile_of(cpu, 50) or 0.0, 1),
        "cpu_max": round(max(cpu), 1),
        "lag_p99_ms": round(percentile_of(lag, 99) or 0.0, 2),
        "lag_max_ms": round(max(lag), 2),
        "saturated_samples": sum(saturated(s) for s in snaps),
        "saturated_share": round(sum(saturated(s) for s in snaps) / len(snaps), 3),
        "steal_mean_pct": round(sum(s.steal_percent for s in snaps) / len(snaps), 2),
        "steal_max_pct": round(max(s.steal_percent for s in snaps), 2),
    }


def is_starved(proc: dict[str, Any], share: float = STARVED_SHARE) -> bool:
    """A process summary with at least ``share`` (and ``STARVED_MIN_SAMPLES``) saturated samples."""
    hot = proc.get("saturated_samples")
    if hot is None:  # a summary without the count: derive it
        hot = round(float(proc.get("saturated_share", 0.0)) * int(proc.get("samples", 0)))
    return hot >= STARVED_MIN_SAMPLES and float(proc.get("saturated_share", 0.0)) >= share


def phase_health(per_source: dict[str, list[HarnessHealth]]) -> dict[str, Any]:
    """The ``health`` block of one phase in ``run.json``."""
    processes = {src: process_summary(snaps) for src, snaps in sorted(per_source.items())}
    starved = sorted(src for src, p in processes.items() if src not in NOT_LOAD and is_starved(p))
    steal = [float(p["steal_mean_pct"]) for p in processes.values() if "steal_mean_pct" in p]
    return {
        # the most any load generator's host lost to the hypervisor, mean % of its CPU time
        "steal_pct": max(steal, default=0.0),
        "line": {"cpu_percent": CPU_LINE_PCT, "loop_lag_ms": LAG_LINE_S * 1000.0},
        "starved_share": STARVED_SHARE,
        "starved_min_samples": STARVED_MIN_SAMPLES,
        "processes": processes,
        "starved": starved,
    }


@dataclass
class HealthLog:
    """Collects snapshots while a phase is open; ``end`` returns that phase's ``health`` block."""

    _phase: str | None = None
    _samples: dict[str, list[HarnessHealth]] = field(default_factory=dict)

    def begin(self, phase: str) -> None:
        self._phase = phase
        self._samples = {}

    def add(self, source: str, snap: HarnessHealth) -> None:
        """A snapshot from ``source``; ignored between phases (cool-down, set-up)."""
        if self._phase is not None:
            self._samples.setdefault(source, []).append(snap)

    def end(self, phase: str) -> dict[str, Any] | None:
        """Close ``phase``; None when it was not the open one."""
        if phase != self._phase:
            return None
        self._phase = None
        return phase_health(self._samples)
