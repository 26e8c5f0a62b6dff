"""Put the server's side into a summary: each phase's ``server`` block and diagnostics, and
the run's ``server_metrics`` block (what was scraped, what could not be seen); the same for
the GPU exporter's ``gpu`` blocks and ``gpu_metrics``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llmload.reports.server import gpu
from llmload.reports.server.diagnose import moved, phase_diagnostics
from llmload.reports.server.phase import family_for, phase_block
from llmload.reports.table.loader import Run
from llmload.reports.table.schema import PhaseStats
from llmload.reports.table.scrapes import ServerRun


def run_block(sr: ServerRun) -> dict[str, Any]:
    """``summary.json``'s ``server_metrics``: the source, how scraping went, what was seen."""
    server = sr.server()
    have = sr.names()
    out: dict[str, Any] = {
        "url": sr.meta.get("url"),
        "status": sr.status,
        "reason": sr.meta.get("reason"),
        "interval_s": sr.meta.get("interval_s"),
        "clock": sr.meta.get("clock"),
        "server": server.key if server else None,
        "name": server.name if server else None,
        "scrapes": len(sr.scrapes),
        "failed": len(sr.failed),
        "last_error": sr.failed[-1][1] if sr.failed else None,
        "corrupt_lines": sr.corrupt_lines,
        "families": sorted(have),
    }
    if server is not None:
        out["roles"] = {r: family_for(server, r, have) for r in server.roles}
    return out


def _phase_times(run: Run) -> dict[str, tuple[float, float]]:
    times: dict[str, tuple[float, float]] = {}
    for ph in run.meta.get("phases") or []:
        try:
            times.setdefault(str(ph["name"]), (float(ph["started_at"]), float(ph["ended_at"])))
        except (KeyError, TypeError, ValueError):
            continue
    return times


def attach_gpu(
    run: Run, phases: dict[str, PhaseStats]
) -> tuple[dict[str, PhaseStats], dict[str, Any] | None]:
    """The phases with their ``gpu`` blocks (``reports.server.gpu``), and the run's
    ``gpu_metrics`` block (None: the run has no ``gpu_metrics.jsonl``)."""
    gr = run.gpu
    if gr is None:
        return phases, None
    times = _phase_times(run)
    out = dict(phases)
    for name, stats in phases.items():
        if name not in times:
            continue
        t0, t1 = times[name]
        flight = gpu.in_flight_mean(run, name, t0, t1)
        block = gpu.phase_block(gr, name, t0, t1, stats.output_tokens_total, flight)
        if block is not None:
            out[name] = replace(stats, extra={**stats.extra, "gpu": block})
    return out, gpu.run_block(gr)


def _labels(run: Run) -> dict[str, str]:
    """A capacity step's phase -> its load in words (``8 req/s``; a trace's pace ``3×``)."""
    cap = run.meta.get("capacity")
    if not isinstance(cap, dict):
        return {}
    unit = cap.get("unit", "")
    return {
        str(s["phase"]): f"{s['load']:g}×" if unit == "speedup" else f"{s['load']:g} {unit}"
        for s in cap.get("steps") or []
        if isinstance(s, dict) and "phase" in s and isinstance(s.get("load"), int | float)
    }


def attach(
    run: Run, phases: dict[str, PhaseStats]
) -> tuple[dict[str, PhaseStats], dict[str, Any] | None]:
    """The phases with their server blocks and diagnostics, and the run's block (None: the run
    has no ``server_metrics.jsonl``)."""
    sr = run.server
    if sr is None:
        return phases, None
    times = _phase_times(run)
    out = dict(phases)
    for name, stats in phases.items():
        if name not in times:
            continue
        block = phase_block(sr, name, *times[name], stats)
        if block is None:
            continue
        found = [d.to_dict() for d in phase_diagnostics(block)]
        out[name] = replace(
            stats,
            extra={**stats.extra, "server": block},
            diagnostics=[*(stats.diagnostics or []), *found],
        )
    names = list(out)
    labels = _labels(run)
    for a, b in zip(names, names[1:], strict=False):
        d = moved((a, out[a]), (b, out[b]), labels)
        if d is not None:
            out[b] = replace(out[b], diagnostics=[*(out[b].diagnostics or []), d.to_dict()])
    return out, run_block(sr)
