"""The report's between-run spread: summary.json's ``repeats`` block (``--repeat N``).

For each target (the run's, and ``--baseline-target``'s) and mode run more than
once, each repeat's TTFT p95, ITL p95, output tokens/s and error rate, with their
min, median, max and spread — ``(max - min) / median``: the run-to-run noise a
single phase's figures do not show.
"""

from __future__ import annotations

import statistics
from typing import Any

from llmload.loadtests.run.phases import BASELINE_PREFIX

#: what the report's spread table shows of each repeated phase: (label, how to read it)
REPORTED: tuple[tuple[str, str], ...] = (
    ("TTFT p95 ms", "ttft"),
    ("ITL p95 ms", "itl"),
    ("output tokens/s", "tokens"),
    ("error rate", "errors"),
)


def _phase_stat(g: Any, what: str) -> float | None:
    if what == "ttft":
        return g.dist("ttft_ms").p95
    if what == "itl":
        return g.dist("itl_ms").p95
    if what == "tokens":
        return float(g.output_tokens_per_s)
    return float(g.error_rate)


def repeats_of(meta: dict[str, Any]) -> int:
    """How many times the run ran each measured phase (``--repeat``; 1 when it does not say).

    Only these phases are repeats: a capacity search's steps are phases of one mode
    too, each at its own load, and their differences are the curve, not noise."""
    config = meta.get("config")
    n = config.get("repeat") if isinstance(config, dict) else None
    return n if isinstance(n, int) and n > 1 else 1


def spread_row(values: dict[str, float | None], **labels: Any) -> dict[str, Any] | None:
    """One row: ``labels``, each phase's value, min, median, max and the spread (% of the
    median); None with fewer than two values."""
    got = [v for v in values.values() if v is not None]
    if len(got) < 2:
        return None
    mid = statistics.median(got)
    return {
        **labels,
        "phases": values,
        "min": min(got),
        "median": mid,
        "max": max(got),
        "spread_pct": (max(got) - min(got)) / mid * 100 if mid else None,
    }


def report_spread(phases: dict[str, Any]) -> list[dict[str, Any]]:
    """summary.json's ``repeats``: per target and mode run more than once, each repeat's
    TTFT p95, ITL p95, output tokens/s and error rate, and their spread (% of the median)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name, g in phases.items():
        role = "baseline" if name.startswith(BASELINE_PREFIX) else "run"
        groups.setdefault((role, g.mode), []).append(name)
    out = []
    for (role, mode), names in groups.items():
        if len(names) < 2:
            continue
        for label, what in REPORTED:
            values = {n: _phase_stat(phases[n], what) for n in names}
            row = spread_row(values, target=role, mode=mode, metric=label)
            if row is not None:
                out.append(row)
    return out


def spread_lines(rows: list[dict[str, Any]]) -> list[str]:
    """``run stream TTFT p95 ms: 219.5, 221.0, 224.3 (spread 2.2%)`` per row."""
    out = []
    for s in rows:
        values = ", ".join("–" if v is None else f"{v:.4g}" for v in s["phases"].values())
        pct = s.get("spread_pct")
        spread = "" if pct is None else f" (spread {pct:.1f}% of the median)"
        who = f"{s['target']} " if s.get("target") else ""
        out.append(f"{who}{s['mode']} {s['metric']}: {values}{spread}")
    return out
