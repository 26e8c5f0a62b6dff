"""What the answers were: reasoning first, tool calls, no visible output (pure functions).

``answer_stats`` adds a phase's answer-shape statistics to its summary: the
distributions ``ttfo_ms`` (time to first output token: the first answer text or
tool-call piece, after any reasoning), ``reasoning_tokens`` and ``answer_tokens``
(output tokens less reasoning), and the counts block ``answers``
(``PhaseStats.extra``): ``ok`` responses, of them ``no_output`` (the server counted
tokens and nothing visible arrived: such a response has no TTFT, so the latency
percentiles are of the others), ``reasoning`` (began with reasoning) and
``tool_calls`` (answered with a tool call), and ``unknown_events`` (events of a
type the protocol does not define, skipped: a newer server's).  ``answer_lines``
says the same in words for the renderers' data-quality sections.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.draw.fmt import fmt_ms
from llmload.reports.table.arraystats import stats_of
from llmload.reports.table.columns import RecordTable
from llmload.reports.table.schema import MetricStats, PhaseStats, Summary

MS = 1000.0


def answer_stats(ok: Sequence[RequestRecord]) -> tuple[dict[str, MetricStats], dict[str, int]]:
    """The answer distributions of a phase's ok records, and its ``answers`` block (empty
    when every answer was plain text that showed).  Read from the records' columns
    (``reports.table.columns``; a list is made a table), exactly."""
    t = RecordTable.of(ok)
    dists: dict[str, MetricStats] = {}
    ttfo = stats_of(t.num("ttfo_s"), MS)
    if ttfo.n:
        dists["ttfo_ms"] = ttfo
    reasoning = t.num("reasoning_tokens")
    counted = ~np.isnan(reasoning)
    reasoned = counted & (reasoning != 0)
    if reasoned.any():
        dists["reasoning_tokens"] = stats_of(reasoning[counted])
        out = t.num("output_tokens")[counted]
        dists["answer_tokens"] = stats_of(out - reasoning[counted])  # (NaN: no output count)
    counts = {
        "no_output": int(t.flag("no_output").sum()),
        "reasoning": int(reasoned.sum()),
        "tool_calls": int((t.num("tool_calls") > 0).sum()),
        "unknown_events": int(np.nansum(t.num("unknown_events"))),
    }
    if not any(counts.values()):
        return dists, {}
    return dists, {"ok": len(t), **counts}


def _count(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def n_of_m(d: MetricStats, g: PhaseStats) -> str:
    """`` (n 7 of 12)`` when a latency distribution covers fewer than the phase's ok
    responses (those without the time: no visible output, no answer after reasoning)."""
    return f" (n {d.n} of {g.ok})" if d.n < g.ok else ""


def answer_lines(summary: Summary) -> list[str]:
    """Per phase, in words: responses without visible output, reasoning, tool calls."""
    lines: list[str] = []
    for name, g in summary.phases.items():
        block: dict[str, Any] = g.extra.get("answers") or {}
        if not block:
            continue
        ok = block.get("ok", g.ok)
        if block.get("no_output"):
            k = block["no_output"]
            lines.append(
                f"{name}: {k} of {ok} ok responses had no visible output — the server counted "
                f"their tokens in usage, nothing arrived — so they have no TTFT: the latency "
                f"percentiles are of the other {ok - k}"
            )
        if block.get("reasoning"):
            ttfo, ttft = g.dist("ttfo_ms"), g.dist("ttft_ms")
            reasoning, answer = g.dist("reasoning_tokens"), g.dist("answer_tokens")
            lines.append(
                f"{name}: {block['reasoning']} of {ok} answers began with reasoning: first "
                f"output token (TTFO) p50 {fmt_ms(ttfo.p50)} / p95 {fmt_ms(ttfo.p95)} ms"
                f"{n_of_m(ttfo, g)}, first token (TTFT) p50 {fmt_ms(ttft.p50)} ms; reasoning "
                f"tokens p50 {_count(reasoning.p50)}, answer tokens p50 {_count(answer.p50)}"
            )
        if block.get("tool_calls"):
            lines.append(
                f"{name}: {block['tool_calls']} of {ok} answers were tool calls (timed like "
                "text: the call's name is its first token; left out of the token-count "
                "comparison, whose server counts include the call's markup)"
            )
        if block.get("unknown_events"):
            lines.append(
                f"{name}: {block['unknown_events']} events of types the protocol does not "
                "define were skipped (a newer server's?): nothing in them was timed or counted"
            )
    return lines
