"""Where each measured phase reached its steady state: MSER-5 on its per-second TTFT.

``--warmup auto`` replaces a guessed warm-up with one found in the data: for each
measured phase of at least ``MIN_SECONDS`` (15) seconds, the series of per-second
mean TTFT (requests by the second they started in, successful ones; a second
without one is skipped) goes through the MSER-5 truncation rule
(``loadtests.steady``); the seconds before the point it finds are the phase's
transient.  Its records stay in ``requests.jsonl`` and, like
a warm-up's, are left out of every statistic, the baseline and the gate
(``reports.table.loader.Run.measured``).  Without ``--warmup auto`` the point is still
found and reported, and nothing is left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.steady import BATCH, mser
from llmload.reports.table.arraystats import exact_sum
from llmload.reports.table.columns import RecordTable

METHOD = "MSER-5"
SERIES = "per-second mean TTFT (requests by start second)"
AUTO = "auto"


@dataclass(frozen=True)
class Steady:
    """Where one phase's steady state began."""

    phase: str
    method: str
    series: str
    #: seconds from the phase's start to the steady state (0: it was steady from the start)
    start_s: float
    #: wall time of that point
    started_at: float
    #: whole seconds in the series, and how many of them MSER-5 dropped
    seconds: int
    dropped_seconds: int
    #: --warmup auto: records before the point are left out of the statistics
    applied: bool
    records_left_out: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def per_second_ttft(records: Sequence[RequestRecord], start: float) -> list[tuple[int, float]]:
    """``(second since start, mean TTFT in ms)`` of every second in which an ok request began
    (from the records' columns: the exact ``math.fsum`` mean of each second's)."""
    t = RecordTable.of(records)
    ttft, started = t.num("ttft_s"), t.num("started_at")
    keep = t.ok() & np.isfinite(ttft) & (started >= start)
    if not keep.any():
        return []
    seconds = (started[keep] - start).astype(np.int64)  # int(): toward zero, as >= 0
    values = ttft[keep] * 1000.0
    order = np.argsort(seconds, kind="stable")
    seconds, values = seconds[order], values[order]
    cuts = np.flatnonzero(np.diff(seconds)) + 1
    out = []
    for part_s, part_v in zip(np.split(seconds, cuts), np.split(values, cuts), strict=True):
        out.append((int(part_s[0]), exact_sum(part_v) / len(part_v)))
    return out


#: fewer seconds than this (three batches) cannot show a transient: nothing is cut
MIN_SECONDS = 3 * BATCH


def find_steady(
    phase: str, records: Sequence[RequestRecord], start: float, applied: bool
) -> Steady | None:
    """MSER-5 on one phase's per-second TTFT; None with fewer than ``MIN_SECONDS`` seconds."""
    series = per_second_ttft(records, start)
    if len(series) < MIN_SECONDS:
        return None
    dropped = mser([v for _, v in series])
    second = series[dropped][0] if dropped else 0
    at = start + second
    left_out = int((RecordTable.of(records).num("started_at") < at).sum()) if applied else 0
    return Steady(phase, METHOD, SERIES, float(second), at, len(series), dropped, applied, left_out)


def is_auto(meta: dict[str, Any]) -> bool:
    """Was the run made with ``--warmup auto``?"""
    config = meta.get("config")
    return isinstance(config, dict) and config.get("warmup") == AUTO


def steady_states(meta: dict[str, Any], records: Sequence[RequestRecord]) -> dict[str, Steady]:
    """Per measured phase of run.json (and any phase the records name), where it settled."""
    applied = is_auto(meta)
    starts: dict[str, float] = {}
    for ph in meta.get("phases") or []:
        try:
            starts.setdefault(str(ph["name"]), float(ph["started_at"]))
        except (KeyError, TypeError, ValueError):
            continue
    t = RecordTable.of(records)  # each phase's records as columns, none read one by one
    measured = t.where(~t.warmup())
    out = {}
    for name in measured.distinct("phase"):
        recs = measured.where(measured.is_("phase", name))
        start = starts.get(name, float(recs.num("started_at").min()))
        found = find_steady(name, recs, start, applied)
        if found is not None:
            out[name] = found
    return out


def steady_line(s: Steady) -> str:
    """``stream: steady from +12 s (MSER-5 on per-second TTFT); 40 records before it left out``."""
    where = "steady from the start" if not s.start_s else f"steady from +{s.start_s:g} s"
    tail = (
        f"; {s.records_left_out} records before it left out (--warmup auto)"
        if s.applied
        else "; nothing left out (--warmup auto would)"
        if s.start_s
        else ""
    )
    return f"{s.phase}: {where} ({s.method} on its {SERIES}, {s.seconds} s){tail}"


def steady_lines(phases: dict[str, Any]) -> list[str]:
    """One ``steady_line`` per phase of a summary (``PhaseStats.extra["steady"]``)."""
    out = []
    for g in phases.values():
        block = g.extra.get("steady") if hasattr(g, "extra") else None
        if isinstance(block, dict):
            out.append(steady_line(Steady(**block)))
    return out


def steady_part(records: Sequence[RequestRecord]) -> tuple[list[RequestRecord], int]:
    """A short phase's steady part (a capacity step): MSER-5 on its requests' TTFT in start
    order (batches of five requests, not seconds); ``(kept records, how many dropped)``."""
    ordered = sorted(records, key=lambda r: r.started_at)
    timed = [r for r in ordered if r.ok and r.ttft_s is not None and math.isfinite(r.ttft_s)]
    if len(timed) < 2 * BATCH:
        return ordered, 0
    cut = mser([(r.ttft_s or 0.0) for r in timed])
    if not cut:
        return ordered, 0
    at = timed[cut].started_at
    kept = [r for r in ordered if r.started_at >= at]
    return kept, len(ordered) - len(kept)
