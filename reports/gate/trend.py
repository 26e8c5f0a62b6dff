"""``llmload report history DIR``: each gated metric run by run, and where it shifted.

A slow drift never fails one gate (each run is within the allowance of the last
few), yet after twenty builds the metric is 40 % worse.  This reads a history
(``report baseline --history DIR``), takes each gated check's run-level value per
run (oldest first; the run's label or commit on the axis) and marks where the
series' distribution shifted (E-Divisive means, ``reports.table.changepoints``) —
with the run where the shift began.  Markdown (``history.md``, appended to
``$GITHUB_STEP_SUMMARY`` in a GitHub Actions step) and HTML with a chart per
metric (``history.html``).

A history of paired runs (``--baseline-target --repeat N``, appended with each
repeat's twin) also shows each run's change against its baseline target — the mean
of its pairs' differences, the machine's drift cancelled in each pair — in a column
and a chart of its own, and what the next paired run gated against the history can
see (``paired_outlook``: the pairs' spread pooled over the last runs); change points
are looked for in that column too, so a build that slowed against its twin is found
even where the machine's drift hides it in the raw values.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

from llmload.loadtests.measure.adapters.base import streams
from llmload.reports.draw.charts import Axes, Band, Series, render
from llmload.reports.gate.history import (
    DEFAULT_LAST,
    pair_differences,
    paired_outlook,
    read,
    run_level,
    run_value,
    sees,
)
from llmload.reports.gate.metrics import SHARE, MetricSpec
from llmload.reports.gate.result import GateConfig
from llmload.reports.gate.sides import BaselineSide
from llmload.reports.table.changepoints import MIN_SIZE, ChangePoint, change_points

#: the fewest runs a shift is looked for in: ``MIN_SIZE`` either side of it
SHIFT_RUNS = 2 * MIN_SIZE


def _axis_name(doc: dict[str, Any], i: int) -> str:
    h = doc.get("history") or {}
    commit = str(h.get("commit") or "")[:10]
    return commit or str(h.get("label") or doc.get("source_run") or f"run {i + 1}")


def _series(docs: list[dict[str, Any]], spec: MetricSpec, mode: str) -> list[float | None]:
    return [run_value(BaselineSide(d), spec, mode) for d in docs]


def _shifts(values: list[float | None], spec: MetricSpec, seed: int) -> list[ChangePoint]:
    """Change points of the runs that have a value (indices into ``values``)."""
    kept = [
        (i, v)
        for i, v in enumerate(values)
        if v is not None and (v > 0 or spec.metric.kind == SHARE)
    ]
    if len(kept) < SHIFT_RUNS:
        return []
    scale = [v if spec.metric.kind == SHARE else math.log(v) for _, v in kept]
    found = change_points(scale, seed=seed)
    back = [
        ChangePoint(
            kept[c.index][0],
            c.p_value,
            c.before if spec.metric.kind == SHARE else math.exp(c.before),
            c.after if spec.metric.kind == SHARE else math.exp(c.after),
        )
        for c in found
    ]
    return back


def _what_it_sees(
    values: list[float | None], found: list[ChangePoint], spec: MetricSpec, mode: str
) -> str | None:
    """What a gate against this history can see: the run-to-run spread of its last
    ``DEFAULT_LAST`` runs since the last shift, and how often one new run gated against
    them fails twice the allowance (``reports.gate.history.sees``); None below 2 runs."""
    since = found[-1].index if found else 0
    kept = [v for v in values[since:] if v is not None][-DEFAULT_LAST:]
    if spec.metric.kind != SHARE:
        kept = [v for v in kept if v > 0]
    if len(kept) < 2:
        return None
    # a future run at the history's centre: its side adds nothing to the pooled spread
    centre = (
        statistics.fmean(kept)
        if spec.metric.kind == SHARE
        else math.exp(statistics.fmean(map(math.log, kept)))
    )
    level = run_level(spec, mode, kept, [centre])
    if level is None:
        return None
    spread = (
        f"{level.spread * 100:.2f} points"
        if level.is_share
        else f"{(math.exp(level.spread) - 1) * 100:.1f}%"
    )
    return (
        f"run-to-run spread {spread} over the last {len(kept)} runs"
        + (" since the shift" if found else "")
        + f"; one run gated against them {sees(level, 0.05)}"
    )


def _paired_changes(docs: list[dict[str, Any]], spec: MetricSpec, mode: str) -> list[list[float]]:
    """Each entry's pairs' differences (a ``--baseline-target --repeat`` run's: its target
    against the baseline target, pair by pair); empty for the others."""
    return [pair_differences(d, spec, mode) if d.get("twins") else [] for d in docs]


def _paired_sees(diffs: list[list[float]], spec: MetricSpec, mode: str) -> str | None:
    """What a gate of the next paired run, of as many pairs as the newest, against this
    history's last ``DEFAULT_LAST`` paired runs can see (their pairs' spread pooled, each
    run about its own mean: what the builds changed drops out); None without one."""
    kept = [d for d in diffs if d][-DEFAULT_LAST:]
    level = paired_outlook(spec, mode, kept, len(kept[-1])) if kept else None
    if level is None:
        return None
    spread = level.spread_shown(level.spread)
    return (
        f"spread of the pairs' differences {spread} over the last {len(kept)} paired runs; "
        f"a run of {len(kept[-1])} pairs gated against them {sees(level, 0.05)}"
    )


def _paired_shifts(diffs: list[list[float]], spec: MetricSpec, seed: int) -> list[ChangePoint]:
    """Change points of the paired runs' changes (the mean of each run's pairs'
    differences): a shift of the build against its baseline target, which a drift of the
    machine that moves both targets alike does not make.  ``before``/``after`` as ratios
    (a share: differences)."""
    means = [statistics.fmean(d) if d else None for d in diffs]
    if spec.metric.kind == SHARE:
        return _shifts(means, spec, seed)
    return _shifts([None if m is None else math.exp(m) for m in means], spec, seed)


def _fmt_change(v: float, spec: MetricSpec) -> str:
    """A ``_paired_shifts`` level as the paired column shows it."""
    if spec.metric.kind == SHARE:
        return f"{v * 100:+.2f} points"
    return f"{(v - 1) * 100:+.1f}%"


def _pct_change(diffs: list[float], spec: MetricSpec) -> float:
    """A paired run's change, the mean of its pairs' differences: % (a share: points)."""
    mean = statistics.fmean(diffs)
    return mean * 100 if spec.metric.kind == SHARE else math.expm1(mean) * 100


def _change(diffs: list[float], spec: MetricSpec) -> str:
    if not diffs:
        return "–"
    x = _pct_change(diffs, spec)
    return f"{x:+.2f} points" if spec.metric.kind == SHARE else f"{x:+.1f}%"


def _fmt(v: float | None, spec: MetricSpec) -> str:
    if v is None:
        return "–"
    if spec.metric.kind == SHARE:
        return f"{v * 100:.2f}%"
    return f"{v:.1f} {spec.metric.unit}"


def render_history(
    folder: Path,
    metric: str | None = None,
    percentile: float = 95.0,
    mode: str | None = None,
    seed: int = 0,
) -> tuple[str, str]:
    """The history's Markdown and HTML.  ``metric`` and ``mode`` default to ``ttft`` and
    ``stream``, or ``e2e`` and ``sync`` when the newest run's protocol has no stream
    (embeddings, rerank)."""
    history = read(folder)
    docs = history.entries
    protocol = (docs[-1].get("run") or {}).get("protocol") if docs else None
    streamed = not isinstance(protocol, str) or streams(protocol)
    metric = metric or ("ttft" if streamed else "e2e")
    mode = mode or ("stream" if streamed else "sync")
    specs = GateConfig(metric=metric, percentile=percentile).specs()
    names = [_axis_name(d, i) for i, d in enumerate(docs)]
    md = [f"## llmload history: {folder.name} ({len(docs)} runs, mode {mode})", ""]
    if history.skipped:
        md.append(
            f"Skipped {len(history.skipped)} unreadable entries: {'; '.join(history.skipped)}"
        )
        md.append("")
    columns = {spec.name: _series(docs, spec, mode) for spec in specs}
    pairs = {spec.name: _paired_changes(docs, spec, mode) for spec in specs}
    paired = [s for s in specs if any(pairs[s.name])]
    shifts = {spec.name: _shifts(columns[spec.name], spec, seed) for spec in specs}
    paired_shifts = {spec.name: _paired_shifts(pairs[spec.name], spec, seed) for spec in paired}
    for spec in specs:
        found = shifts[spec.name]
        if not found:
            words = (
                "no shift found"
                if len(docs) >= SHIFT_RUNS
                else f"too few runs to look for a shift ({SHIFT_RUNS})"
            )
            md.append(f"- **{spec.name}**: {words}")
        for c in found:
            md.append(
                f"- **{spec.name}**: shifted at run {c.index + 1} ({names[c.index]}), "
                f"{_fmt(c.before, spec)} → {_fmt(c.after, spec)} (permutation p = {c.p_value:.3f})"
            )
        if (seen := _what_it_sees(columns[spec.name], found, spec, mode)) is not None:
            md.append(f"- **{spec.name}**: {seen}")
        if spec in paired:
            runs = sum(1 for d in pairs[spec.name] if d)
            if runs >= SHIFT_RUNS and not paired_shifts[spec.name]:
                md.append(f"- **{spec.name}** vs baseline target: no shift found")
            for c in paired_shifts[spec.name]:
                md.append(
                    f"- **{spec.name}** vs baseline target: shifted at run {c.index + 1} "
                    f"({names[c.index]}), {_fmt_change(c.before, spec)} → "
                    f"{_fmt_change(c.after, spec)} (permutation p = {c.p_value:.3f})"
                )
        if (seen := _paired_sees(pairs[spec.name], spec, mode)) is not None:
            md.append(f"- **{spec.name}**, pair by pair: {seen}")
    heads = [s.name for s in specs] + [f"{s.name} vs baseline target" for s in paired]
    md += ["", "| # | run | created | " + " | ".join(heads) + " |"]
    md.append("|---|---|---|" + "---|" * len(heads))
    for i, doc in enumerate(docs):
        cells = []
        for spec in specs:
            mark = " ◀ shift" if any(c.index == i for c in shifts[spec.name]) else ""
            cells.append(_fmt(columns[spec.name][i], spec) + mark)
        cells += [
            _change(pairs[spec.name][i], spec)
            + (" ◀ shift" if any(c.index == i for c in paired_shifts[spec.name]) else "")
            for spec in paired
        ]
        md.append(
            f"| {i + 1} | {names[i]} | {doc.get('created_at', '')} | " + " | ".join(cells) + " |"
        )
    markdown = "\n".join(md) + "\n"
    charts = []
    for k, spec in enumerate(specs):
        points = [(i + 1.0, v) for i, v in enumerate(columns[spec.name]) if v is not None]
        if spec.metric.kind == SHARE:
            points = [(x, y * 100) for x, y in points]
        bands = [
            Band(c.index + 0.5, len(docs) + 0.5, f"after the shift at run {c.index + 1}")
            for c in shifts[spec.name][:1]
        ]
        ax = Axes(
            f"{spec.name} {mode}, run by run",
            "run (oldest first)",
            "%" if spec.metric.kind == SHARE else spec.metric.unit,
            f"history-{k}",
            [Series(spec.name, points, "line")],
            bands,
            y_zero=False,
        )
        charts.append(render(ax))
    for k, spec in enumerate(paired):
        changes = [(i + 1.0, _pct_change(d, spec)) for i, d in enumerate(pairs[spec.name]) if d]
        ax = Axes(
            f"{spec.name} {mode} against the baseline target, pair by pair",
            "run (oldest first)",
            "points" if spec.metric.kind == SHARE else "%",
            f"history-paired-{k}",
            [Series("mean of the pairs' differences", changes, "line")],
            [
                Band(c.index + 0.5, len(docs) + 0.5, f"after the shift at run {c.index + 1}")
                for c in paired_shifts[spec.name][:1]
            ],
            y_zero=False,
        )
        charts.append(render(ax))
    html = (
        "<!doctype html><meta charset=utf-8><title>llmload history</title>"
        f"<h1>llmload history: {escape(folder.name)}</h1>"
        + "".join(charts)
        + f"<pre>{escape(markdown)}</pre>"
    )
    return markdown, html


def write_history(out: Path, markdown: str, html: str, env: Mapping[str, str]) -> None:
    """history.md and history.html into ``out``; the Markdown to the step summary in CI."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "history.md").write_text(markdown, encoding="utf-8")
    (out / "history.html").write_text(html, encoding="utf-8")
    if summary := env.get("GITHUB_STEP_SUMMARY"):
        with open(summary, "a", encoding="utf-8") as f:
            f.write(markdown + "\n")
