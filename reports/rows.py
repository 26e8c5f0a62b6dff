"""Rows and phrases the renderers share: the phase and comparison tables, diagnostic hints.

Pure functions of a summary; ``reports.markdown``, ``reports.html``,
``reports.terminal`` and ``reports.compare`` are sibling renderers over them
(number formatting is ``reports.fmt``).
"""

from __future__ import annotations

from typing import Any

from reports.fmt import fmt_ms, fmt_pct, fmt_rate
from reports.trust import harness_text

DIAGNOSTIC_HINTS = {
    "proxy_buffering": (
        "Streamed tokens arrived all at once at the end of the response: a proxy in front of "
        "the server is buffering the stream (nginx: `proxy_buffering off;` or send "
        "`X-Accel-Buffering: no`)."
    ),
}


def comparison_rows(summary: dict[str, Any]) -> list[list[str]]:
    """The seeds' table: scenario, sync first/total, stream first/total, improvement."""
    comp = summary.get("comparison")
    if not comp:
        return []
    rows = []
    for name, c in comp["scenarios"].items():
        rows.append(
            [
                name,
                f"first {fmt_ms(c['sync_ttft_ms_p50'])} / total {fmt_ms(c['sync_e2e_ms_p50'])}",
                f"first {fmt_ms(c['stream_ttft_ms_p50'])} / total {fmt_ms(c['stream_e2e_ms_p50'])}",
                f"first {fmt_pct(c['ttft_ms_p50_improvement_pct'])}, "
                f"total {fmt_pct(c['e2e_ms_p50_improvement_pct'])}",
                f"{c['sync_count']} / {c['stream_count']}",
            ]
        )
    return rows


def pair(d: dict[str, Any] | None) -> str:
    """``p50 / p95`` of one distribution, ``– / –`` when it has no values."""
    if not d or not d.get("n"):
        return "– / –"
    return f"{fmt_ms(d['p50'])} / {fmt_ms(d['p95'])}"


def ttstpair(g: dict[str, Any]) -> str:
    """TTST p50 / p95 of a streaming group; ``–`` for sync (its first byte is the whole body)."""
    return pair(g.get("ttst_ms")) if g["mode"] != "sync" else "–"


def phase_row(name: str, g: dict[str, Any]) -> list[str]:
    """One row of the phases table (``PHASE_HEADER``)."""
    errors = ", ".join(f"{k} {v}" for k, v in g["errors"].items()) or "0"
    t = g["ttft_ms"]
    return [
        name,
        g["mode"],
        str(g["count"]),
        errors,
        f"{fmt_ms(t['p50'])} / {fmt_ms(t['p95'])} / {fmt_ms(t['p99'])}",
        ttstpair(g),
        pair(g["itl_ms"]),
        pair(g.get("itl_per_token_ms")),
        fmt_ms(g["tpot_ms"]["p50"]),
        pair(g["e2e_ms"]),
        fmt_rate(g["output_tokens_per_s"]),
        fmt_rate(g["requests_per_s"]),
        fmt_rate(g["goodput_per_s"]),
    ]


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


def harness_lines(summary: dict[str, Any]) -> list[str]:
    """Per phase: the load generator's own CPU and loop lag (``reports.trust``)."""
    return [
        f"{name}: load generator {harness_text(g['harness'])}"
        for name, g in summary["phases"].items()
        if g.get("harness")
    ]


def diag_hint(d: dict[str, Any]) -> str:
    """What a diagnostic found and what to do, in plain language (its own words, else ours)."""
    hint = d.get("hint") or DIAGNOSTIC_HINTS.get(str(d.get("code")), "")
    return " ".join(str(t).strip() for t in (d.get("message"), hint) if t)
