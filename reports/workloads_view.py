"""The workload sections of ``report.html``, ``summary.md`` and the terminal (pure renderers).

Input: the phases' workload blocks (``reports.workloads``, in ``PhaseStats.extra``):
the prefix cache's hit rate and TTFT split by hit and miss.
"""

from __future__ import annotations

from html import escape
from typing import Any

from llmload.reports.fmt import fmt_ms, html_table, table
from llmload.reports.schema import MetricStats, Summary

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
    rows = prefix_rows(summary)
    if not rows:
        return ""
    return (
        '<h2>Prefix cache</h2><div id="prefix-cache">'
        + html_table(PREFIX_HEADER, rows)
        + f'<p class="note">{escape(PREFIX_NOTE)}</p></div>'
    )


def workloads_markdown(summary: Summary) -> str:
    """``summary.md``'s workload sections ("" when the run has none)."""
    rows = prefix_rows(summary)
    if not rows:
        return ""
    return "## Prefix cache\n\n" + table(PREFIX_HEADER, rows) + "\n\n" + PREFIX_NOTE


def workloads_terminal(summary: Summary) -> list[str]:
    """The end-of-run lines for the workloads."""
    return [
        f"  prefix cache {r[0]}: hit rate {r[1]} ({r[2]} requests hit), TTFT hit {r[4]} "
        f"miss {r[5]} ms"
        for r in prefix_rows(summary)
    ]
