"""Two runs side by side (before / after a change): Markdown and HTML."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from llmload.reports.draw.charts import Axes, Series, render
from llmload.reports.draw.fmt import fmt_ms, fmt_num, fmt_rate, table
from llmload.reports.page.html import CSS
from llmload.reports.server.versus import rows as server_rows
from llmload.reports.table import timeseries as ts
from llmload.reports.table.loader import Run
from llmload.reports.table.schema import PhaseStats, Summary

#: (label, (distribution, statistic) or (PhaseStats field,), "ms"|"rate"|"pct"|"int"|"num",
#: lower is better; None: neutral)
ROWS: list[tuple[str, tuple[str, ...], str, bool | None]] = [
    ("TTFT p50 (ms)", ("ttft_ms", "p50"), "ms", True),
    ("TTFT p95 (ms)", ("ttft_ms", "p95"), "ms", True),
    ("TTFT p99 (ms)", ("ttft_ms", "p99"), "ms", True),
    ("ITL p50 (ms)", ("itl_ms", "p50"), "ms", True),
    ("ITL p95 (ms)", ("itl_ms", "p95"), "ms", True),
    ("TPOT p50 (ms)", ("tpot_ms", "p50"), "ms", True),
    ("E2E p50 (ms)", ("e2e_ms", "p50"), "ms", True),
    ("E2E p95 (ms)", ("e2e_ms", "p95"), "ms", True),
    ("output tokens/s", ("output_tokens_per_s",), "rate", False),
    ("requests/s", ("requests_per_s",), "rate", False),
    ("goodput/s", ("goodput_per_s",), "rate", False),
    ("error rate", ("error_rate",), "pct", True),
    ("requests", ("count",), "int", None),
]


def _get(g: PhaseStats, path: tuple[str, ...]) -> float | None:
    value: Any = getattr(g.dist(path[0]), path[1]) if len(path) == 2 else getattr(g, path[0])
    return value if isinstance(value, int | float) else None


def _fmt(v: float | None, kind: str) -> str:
    if v is None:
        return "–"
    if kind == "int":
        return f"{v:.0f}"
    if kind == "num":
        return fmt_num(v)
    return fmt_ms(v) if kind == "ms" else f"{v:.1%}" if kind == "pct" else fmt_rate(v)


def _delta(a: float | None, b: float | None, lower_better: bool | None) -> str:
    if a is None or b is None or a == 0:
        return "–"
    change = (b - a) / abs(a) * 100
    if abs(change) < 0.05:
        return "±0%"
    if lower_better is None:
        return f"{change:+.1f}%"
    better = (change < 0) == lower_better
    return f"{change:+.1f}% {'better' if better else 'worse'}"


def compare_rows(a: Summary, b: Summary) -> dict[str, list[list[str]]]:
    """Per phase present in both summaries: metric, A, B, change."""
    out = {}
    for phase, ga in a.phases.items():
        gb = b.phases.get(phase)
        if gb is None:
            continue
        out[phase] = [
            [
                label,
                _fmt(_get(ga, path), kind),
                _fmt(_get(gb, path), kind),
                _delta(_get(ga, path), _get(gb, path), lower),
            ]
            for label, path, kind, lower in ROWS
        ] + [
            [label, _fmt(va, kind), _fmt(vb, kind), _delta(va, vb, lower)]
            for label, va, vb, kind, lower in server_rows(ga, gb)
        ]
    return out


def render_compare_markdown(a: Summary, b: Summary, diff: Sequence[str] = ()) -> str:
    """Markdown: what differs between the runs (``diff``: the gate's fingerprint, in words),
    then one table per shared phase, A vs B with the change."""
    out = [f"# llmload compare: `{a.run_id}` (A) vs `{b.run_id}` (B)"]
    out.append(
        "What differs: " + "; ".join(diff) + "."
        if diff
        else "The runs' settings are the same (by the gate's fingerprint)."
    )
    rows = compare_rows(a, b)
    for phase, r in rows.items():
        out.append(f"## {phase}\n\n" + table(["metric", "A", "B", "change (B vs A)"], r))
    only = sorted(set(a.phases) ^ set(b.phases))
    if only:
        out.append(f"Phases in only one run (not compared): {', '.join(only)}.")
    if not rows:
        out.append("_The runs share no phase._")
    return "\n\n".join(out) + "\n"


def render_compare_html(
    run_a: Run, a: Summary, run_b: Run, b: Summary, diff: Sequence[str] = ()
) -> str:
    """HTML: the same tables, plus TTFT CDFs of A and B per mode on one chart."""
    parts = [f"<h1>llmload compare: {escape(a.run_id)} (A) vs {escape(b.run_id)} (B)</h1>"]
    series = []
    for label, run in (("A", run_a), ("B", run_b)):
        for s in ts.ttft_cdfs(run.measured):
            if s.name.split(" · ")[0] in ("sync", "stream"):
                series.append(Series(f"{label} {s.name}", s.points, "step", dashed=label == "A"))
    chart = Axes(
        "TTFT CDF, A (dashed) vs B (solid)",
        "TTFT (ms)",
        "fraction ≤ x",
        "chart-compare-ttft",
        series[:12],
    )
    parts.append(f'<div style="max-width:760px">{render(chart)}</div>')
    for phase, r in compare_rows(a, b).items():
        head = "".join(f"<th>{h}</th>" for h in ("metric", "A", "B", "change (B vs A)"))
        body = "".join(
            "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in r
        )
        parts.append(f"<h2>{escape(phase)}</h2><table>{head}{body}</table>")
    meta = "".join(
        f"<tr><td>{escape(k)}</td><td>{escape(str(x.run.get(k, '')))}</td>"
        f"<td>{escape(str(y.run.get(k, '')))}</td></tr>"
        for k in ("target", "model", "protocol", "label", "started_at")
        for x, y in [(a, b)]
    )
    parts.append(f"<h2>Runs</h2><table><tr><th></th><th>A</th><th>B</th></tr>{meta}</table>")
    if diff:
        items = "".join(f"<li>{escape(d)}</li>" for d in diff)
        parts.append(f"<h2>What differs</h2><ul>{items}</ul>")
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>llmload compare'
        f"</title><style>{CSS}</style></head><body>" + "\n".join(parts) + "</body></html>\n"
    )
