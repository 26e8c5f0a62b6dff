"""Rows and phrases the renderers share: the phase and sync-vs-stream tables, diagnostic hints.

Pure functions of the typed summary (``reports.table.schema``); ``reports.page.markdown``,
``reports.page.html``,
``reports.page.terminal`` and ``reports.page.two_runs`` are sibling renderers over them
(number formatting is ``reports.draw.fmt``).
"""

from __future__ import annotations

from typing import Any

from llmload.reports.draw.fmt import fmt_ms, fmt_pct, fmt_rate
from llmload.reports.table.answers import n_of_m
from llmload.reports.table.schema import MetricStats, PhaseStats, Summary
from llmload.reports.table.trust import harness_text

DIAGNOSTIC_HINTS = {
    "proxy_buffering": (
        "Streamed tokens arrived all at once at the end of the response: a proxy in front of "
        "the server is buffering the stream (nginx: `proxy_buffering off;` or send "
        "`X-Accel-Buffering: no`)."
    ),
}


def sync_vs_stream_rows(summary: Summary) -> list[list[str]]:
    """The seeds' table: scenario, sync first/total, stream first/total, improvement."""
    comp = summary.sync_vs_stream
    if not comp:
        return []
    rows = []
    for name, c in comp.scenarios.items():
        sync, stream = (
            f"first {fmt_ms(c.value(mode, 'ttft_ms', 'p50'))} / "
            f"total {fmt_ms(c.value(mode, 'e2e_ms', 'p50'))}"
            for mode in ("sync", "stream")
        )
        rows.append(
            [
                name,
                sync,
                stream,
                f"first {fmt_pct(c.improvement_pct('ttft_ms', 'p50'))}, "
                f"total {fmt_pct(c.improvement_pct('e2e_ms', 'p50'))}",
                f"{c.sync_count} / {c.stream_count}",
            ]
        )
    return rows


def pair(d: MetricStats) -> str:
    """``p50 / p95`` of one distribution, ``– / –`` when it has no values."""
    if not d.n:
        return "– / –"
    return f"{fmt_ms(d.p50)} / {fmt_ms(d.p95)}"


def ttstpair(g: PhaseStats) -> str:
    """TTST p50 / p95 of a streaming group; ``–`` for sync (its first byte is the whole body)."""
    return pair(g.dist("ttst_ms")) if g.mode != "sync" else "–"


def phase_row(name: str, g: PhaseStats) -> list[str]:
    """One row of the phases table (``PHASE_HEADER``)."""
    errors = ", ".join(f"{k} {v}" for k, v in g.errors.items()) or "0"
    t = g.dist("ttft_ms")
    return [
        name,
        g.mode,
        str(g.count),
        errors,
        f"{fmt_ms(t.p50)} / {fmt_ms(t.p95)} / {fmt_ms(t.p99)}{n_of_m(t, g)}",
        ttstpair(g),
        pair(g.dist("itl_ms")),
        pair(g.dist("itl_per_token_ms")),
        fmt_ms(g.dist("tpot_ms").p50),
        pair(g.dist("e2e_ms")),
        fmt_rate(g.output_tokens_per_s),
        fmt_rate(g.requests_per_s),
        fmt_rate(g.goodput_per_s),
    ]


def phase_rows(summary: Summary) -> list[list[str]]:
    """The phases table's rows: each phase (its name in bold), then its scenarios when several."""
    rows = []
    for name, g in summary.phases.items():
        rows.append(phase_row(f"**{name}**", g))
        scenarios = g.scenarios or {}
        if len(scenarios) > 1:
            rows += [phase_row(f"{name} / {s}", sg) for s, sg in scenarios.items()]
    return rows


PHASE_HEADER = [
    "phase / scenario",
    "mode",
    "requests",
    "errors",
    "TTFT p50 / p95 / p99 (ms)",
    "TTST p50 / p95 (ms)",
    "ITL per event p50 / p95 (ms)",
    "ITL per token p50 / p95 (ms)",
    "TPOT p50 (ms)",
    "E2E p50 / p95 (ms)",
    "out tok/s",
    "req/s",
    "goodput/s",
]


PHASE_NOTE = (
    "TTST: time to the second token (second content event) — how soon the stream keeps "
    "going after the first; `–` for sync, whose first byte is the whole answer. "
    "ITL per token: each gap between events divided by the tokens the event carried "
    "(equal to per event when every event carries one token)."
)


INTENDED = (
    ("TTFT from the intended send time", "ttft_from_intended_ms"),
    ("TTFT from the actual send (as measured)", "ttft_ms"),
    ("E2E from the intended send time", "e2e_from_intended_ms"),
    ("schedule delay (intended → actual send)", "schedule_delay_ms"),
)


def harness_lines(summary: Summary) -> list[str]:
    """Per phase: the load generator's own CPU and loop lag (``reports.table.trust``)."""
    return [
        f"{name}: load generator {harness_text(g.harness)}"
        for name, g in summary.phases.items()
        if g.harness
    ]


def open_loop_phases(summary: Summary) -> list[tuple[str, PhaseStats]]:
    """The phases with intended send times (open loop): latency from the schedule is known."""
    return [(n, g) for n, g in summary.phases.items() if "ttft_from_intended_ms" in g.dists]


def diag_hint(d: dict[str, Any]) -> str:
    """What a diagnostic found and what to do, in plain language (its own words, else ours)."""
    hint = d.get("hint") or DIAGNOSTIC_HINTS.get(str(d.get("code")), "")
    return " ".join(str(t).strip() for t in (d.get("message"), hint) if t)
