"""The two sides of a gate: what each offers per mode and scope, from records or a baseline file.

A side answers, for a mode (``stream``/``sync``) and a scope (``all`` requests or
one scenario): a latency metric's values (ms) and their count, a rate metric's
per-second series, and the requests and failures.  ``RecordsSide`` reads a run's
measured records (warm-up and, with ``--warmup auto``, each phase's transient
left out); ``BaselineSide`` reads what ``reports.gate.baseline`` stored of one.  The
gate compares any two — a run against a baseline file, or a run's own
``--baseline-target`` phases against its target's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llmload.loadtests.run.phases import BASELINE_PREFIX
from llmload.loadtests.slo import parse_slo
from llmload.reports.gate.bootstrap import Side
from llmload.reports.gate.metrics import (
    REGISTRY,
    energy_per_second,
    gap_groups,
    latency_ms,
    outcomes,
    per_second,
    phase_windows,
)
from llmload.reports.table.columns import RecordTable
from llmload.reports.table.loader import Run

ALL = "all"


class RecordsSide:
    """One side read from a run's records (its measured phases, or the ``phases`` given), as
    columns (``reports.table.columns``): each group a selection of the run's table."""

    def __init__(
        self, run: Run, phases: Iterable[str] | None = None, slo: str | None = None
    ) -> None:
        self.run = run
        t = run.measured
        self.records: RecordTable = t if phases is None else t.where(t.is_any("phase", phases))
        self.slo = parse_slo(slo if slo is not None else _run_slo(run.meta))
        self.name = run.name

    def modes(self) -> set[str]:
        return set(self.records.distinct("mode"))

    def group(self, mode: str, scope: str = ALL) -> RecordTable:
        """The records of one mode, of all scenarios (``ALL``) or of one."""
        t = self.records
        mask = t.is_("mode", mode)
        if scope != ALL:
            mask &= t.is_("scenario", scope)
        return t.where(mask)

    def scenarios(self, mode: str) -> list[str]:
        """The mode's scenarios, in order of first appearance."""
        return list(self.group(mode).distinct("scenario"))

    def phases(self, mode: str) -> list[str]:
        """The mode's phases, in order of first appearance."""
        return list(self.group(mode).distinct("phase"))

    def latency(self, metric: str, mode: str, scope: str) -> Side | None:
        """A latency metric's values (ms, the caller's own); ITL's grouped by request."""
        group = self.group(mode, scope)
        vals = latency_ms(group, REGISTRY[metric])
        if not len(vals):
            return None
        grouped = REGISTRY[metric].column == "itl_s"
        return Side.of(vals, groups=gap_groups(group) if grouped else None)

    def rates(self, metric: str, mode: str, scope: str) -> list[float] | None:
        phases = sorted(self.phases(mode))
        windows = phase_windows(self.run.meta, phases, self.run.steady_starts)
        if metric == "energy":  # the GPUs cannot tell one scenario's joules from another's
            group = self.group(mode)
            series = energy_per_second(group, self.run.gpu, windows) if scope == ALL else []
            return series or None
        series = per_second(self.group(mode, scope), REGISTRY[metric], windows, self.slo)
        return series or None

    def outcomes(self, mode: str, scope: str) -> tuple[int, int] | None:
        n, bad = outcomes(self.group(mode, scope))
        return (n, bad) if n else None


def repeat_phases(meta: dict[str, Any], mode: str) -> list[str]:
    """The measured phases of ``mode`` on the run's own target (``--repeat``: several)."""
    return [
        str(p.get("name"))
        for p in meta.get("phases") or []
        if p.get("mode") == mode
        and p.get("name") != "warmup"
        and not str(p.get("name", "")).startswith(BASELINE_PREFIX)
    ]


def paired_sides(run: Run) -> tuple[RecordsSide, RecordsSide] | None:
    """A ``--baseline-target`` run's two sides: its target's phases, the baseline target's
    (None: the run has no baseline target's phases)."""
    names = set(run.measured.distinct("phase"))
    base = {n for n in names if n.startswith(BASELINE_PREFIX)}
    if not base:
        return None
    return RecordsSide(run, names - base), RecordsSide(run, base)


def _run_slo(meta: dict[str, Any]) -> str | None:
    config = meta.get("config")
    slo = config.get("slo") if isinstance(config, dict) else None
    return slo if isinstance(slo, str) and slo else None


class BaselineSide:
    """One side read from a baseline document (``reports.gate.baseline.make_baseline``)."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.name = str(doc.get("source_run", ""))

    def modes(self) -> set[str]:
        return {m for per in self.doc.get("metrics", {}).values() for m in per} | set(
            self.doc.get("outcomes") or {}
        )

    def scenarios(self, mode: str) -> list[str]:
        return list((self.doc.get("outcomes") or {}).get(mode, {}).get("scenarios") or [])

    def latency(self, metric: str, mode: str, scope: str) -> Side | None:
        """The stored values (or their sketch) and count; the design effects stored with them."""
        if scope == ALL:
            entry = self.doc.get("metrics", {}).get(metric, {}).get(mode)
        else:
            entry = self.doc.get("by_scenario", {}).get(metric, {}).get(mode, {}).get(scope)
        if not isinstance(entry, dict) or not entry.get("values_ms"):
            return None
        effects = entry.get("design_effect")
        return Side.of(
            entry["values_ms"],
            int(entry["n"]),
            effects=dict(effects) if isinstance(effects, dict) else None,
        )

    def rates(self, metric: str, mode: str, scope: str) -> list[float] | None:
        series = self.doc.get("rates", {}).get(metric, {}).get(mode, {}).get(scope)
        return list(series) if series else None

    def outcomes(self, mode: str, scope: str) -> tuple[int, int] | None:
        entry = (self.doc.get("outcomes") or {}).get(mode, {}).get("groups", {}).get(scope)
        if not isinstance(entry, dict) or not entry.get("n"):
            return None
        return int(entry["n"]), int(entry["failed"])
