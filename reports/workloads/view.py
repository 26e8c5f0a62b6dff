"""The workload sections of ``report.html``, ``summary.md`` and the terminal (pure renderers).

Input: the phases' workload blocks (``reports.workloads.measure``, in ``PhaseStats.extra``):
the prefix cache's hit rate and TTFT split by hit and miss; agent sessions per step
and per session.
"""

from __future__ import annotations

from html import escape
from typing import Any

from llmload.reports.draw.fmt import fmt_ms, html_table, table
from llmload.reports.table.schema import MetricStats, Summary

PREFIX_HEADER = [
    "phase",
    "token hit rate",
    "requests hit",
    "cached / prompt tokens",
    "TTFT hit p50 / p95 (ms)",
    "TTFT miss p50 / p95 (ms)",
]
PREFIX_NOTE = (
    "From the server's usage.prompt_tokens_details.cached_tokens: the token hit rate is "
    "cached over prompt tokens (vLLM's prefix_cache_hits / prefix_cache_queries); a request "
    "hit when any of its prompt was cached."
)


AGENT_HEADER = [
    "phase",
    "step",
    "requests (ok)",
    "TTFT p50 / p95 (ms)",
    "E2E p50 (ms)",
    "prompt tokens (mean)",
    "cached tokens (mean)",
]
AGENT_NOTE = (
    "Each step is one model call of a session; it carries the whole history, so its "
    "prompt (and, without a prefix cache, its TTFT) grows step by step. Time to the final "
    "answer: from a session's first request to the end of its answer that made no tool call."
)


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def agent_rows(summary: Summary) -> tuple[list[list[str]], list[str]]:
    """Per phase and step: one row each; and one line per phase on its sessions."""
    rows, lines = [], []
    for name, g in summary.phases.items():
        b = g.extra.get("agent")
        if not b:
            continue
        for step, s in b["steps"].items():
            ttft, e2e = MetricStats.from_json(s["ttft_ms"]), MetricStats.from_json(s["e2e_ms"])
            rows.append(
                [
                    name,
                    step,
                    f"{s['requests']} ({s['ok']})",
                    f"{fmt_ms(ttft.p50)} / {fmt_ms(ttft.p95)}",
                    fmt_ms(e2e.p50),
                    _num(s["prompt_tokens_mean"]),
                    _num(s["cached_tokens_mean"]),
                ]
            )
        total = MetricStats.from_json(b["session_ms"])
        line = (
            f"{name}: {b['complete']} of {b['sessions']} sessions reached their final answer "
            f"(mean {b['steps_per_session_mean'] or 0:.1f} steps); time to the final answer "
            f"p50 {fmt_ms(total.p50)} ms, p95 {fmt_ms(total.p95)} ms"
        )
        if "session_from_intended_ms" in b:
            late = MetricStats.from_json(b["session_from_intended_ms"])
            line += f" (from the intended start p50 {fmt_ms(late.p50)}, p95 {fmt_ms(late.p95)})"
        lines.append(line)
    return rows, lines


def _pair(d: dict[str, Any]) -> str:
    s = MetricStats.from_json(d)
    return f"{fmt_ms(s.p50)} / {fmt_ms(s.p95)} (n {s.n})"


def prefix_rows(summary: Summary) -> list[list[str]]:
    """One row per phase with a prefix-cache block."""
    rows = []
    for name, g in summary.phases.items():
        b = g.extra.get("prefix_cache")
        if not b:
            continue
        rows.append(
            [
                name,
                f"{b['hit_rate']:.1%}",
                f"{b['hit_requests']} of {b['requests']}",
                f"{b['cached_tokens']:,} / {b['prompt_tokens']:,}",
                _pair(b["ttft_hit_ms"]),
                _pair(b["ttft_miss_ms"]),
            ]
        )
    return rows


def workloads_html(summary: Summary) -> str:
    """The report's workload sections ("" when the run has none)."""
    out = []
    rows = prefix_rows(summary)
    if rows:
        out.append(
            '<h2>Prefix cache</h2><div id="prefix-cache">'
            + html_table(PREFIX_HEADER, rows)
            + f'<p class="note">{escape(PREFIX_NOTE)}</p></div>'
        )
    steps, sessions = agent_rows(summary)
    if steps:
        out.append(
            '<h2>Agent sessions</h2><div id="agent-sessions">'
            + "".join(f"<p>{escape(line)}.</p>" for line in sessions)
            + html_table(AGENT_HEADER, steps)
            + f'<p class="note">{escape(AGENT_NOTE)}</p></div>'
        )
    return "".join(out)


def workloads_markdown(summary: Summary) -> str:
    """``summary.md``'s workload sections ("" when the run has none)."""
    out = []
    rows = prefix_rows(summary)
    if rows:
        out.append("## Prefix cache\n\n" + table(PREFIX_HEADER, rows) + "\n\n" + PREFIX_NOTE)
    steps, sessions = agent_rows(summary)
    if steps:
        lines = "\n".join(f"- {line}." for line in sessions)
        out.append(
            "## Agent sessions\n\n"
            + lines
            + "\n\n"
            + table(AGENT_HEADER, steps)
            + "\n\n"
            + AGENT_NOTE
        )
    return "\n\n".join(out)


def workloads_terminal(summary: Summary) -> list[str]:
    """The end-of-run lines for the workloads."""
    lines = [
        f"  prefix cache {r[0]}: hit rate {r[1]} ({r[2]} requests hit), TTFT hit {r[4]} "
        f"miss {r[5]} ms"
        for r in prefix_rows(summary)
    ]
    steps, sessions = agent_rows(summary)
    lines += [f"  agent sessions {line}" for line in sessions]
    lines += [f"    step {r[1]}: TTFT p50 / p95 {r[3]} ms, prompt tokens {r[5]}" for r in steps]
    return lines
