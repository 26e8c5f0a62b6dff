"""Between-run spread: a gated metric's statistic in each repeat of a phase (``--repeat N``).

(The report's own view, from the phases' statistics, is ``reports.summary.repeats``.)

The gate compares all repeats of a mode together; how much one repeat differs
from the next is the run-to-run noise the single interval does not show — a
spread larger than the allowance says the verdict rests on luck.  For each
gated metric and mode run more than once: each phase's statistic (a latency's
percentile, a rate's mean per second, the error share), their min, median, max
and the spread ``(max - min) / median``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any, Protocol

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.gate.metrics import (
    LATENCY,
    RATE,
    MetricSpec,
    latency_ms,
    outcomes,
    per_second,
    phase_windows,
)
from llmload.reports.summary.repeats import repeats_of, spread_row
from llmload.reports.table.arraystats import percentile_sorted
from llmload.reports.table.columns import RecordTable
from llmload.reports.table.loader import Run


class Records(Protocol):
    """A side read from records (``reports.gate.sides.RecordsSide``)."""

    run: Run
    records: RecordTable
    slo: dict[str, float]


def phase_value(
    spec: MetricSpec, run: Run, phase: str, records: Sequence[RequestRecord], slo: dict[str, float]
) -> float | None:
    """``spec``'s statistic over one phase's records (None: no value)."""
    metric = spec.metric
    if metric.kind == LATENCY:
        values = latency_ms(records, metric)
        if not len(values):
            return None
        values.sort()
        return percentile_sorted(values, spec.percentile or 95.0)
    if metric.kind == RATE:
        windows = phase_windows(run.meta, [phase], run.steady_starts)
        series = per_second(records, metric, windows, slo)
        return statistics.fmean(series) if series else None
    n, bad = outcomes(records)
    return bad / n if n else None


def spread(
    run: Run, specs: Sequence[MetricSpec], side: Records, target: str = "run"
) -> list[dict[str, Any]]:
    """Per gated metric and repeated mode: each repeat's value and the spread between them
    (``target``: which side it is, the run's or the baseline target's)."""
    if repeats_of(run.meta) < 2:
        return []
    t = side.records
    out = []
    for mode in t.distinct("mode"):
        of_mode = t.where(t.is_("mode", mode))
        phases = {p: of_mode.where(of_mode.is_("phase", p)) for p in of_mode.distinct("phase")}
        if len(phases) < 2:
            continue
        for spec in specs:
            values = {p: phase_value(spec, run, p, recs, side.slo) for p, recs in phases.items()}
            row = spread_row(
                values, target=target, metric=spec.name, mode=mode, unit=spec.metric.unit
            )
            if row is not None:
                out.append(row)
    return out
