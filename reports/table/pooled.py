"""Runs without a stream: embeddings and rerank (pure functions).

Such a request returns no token, so TTFT, ITL, TPOT and tokens per second do not
apply: its latency is the whole response (E2E), and its throughput is inputs
(texts embedded, documents ranked) and prompt tokens per second.  ``pooled_stats``
adds the phase's ``pooled`` block to its summary (``PhaseStats.extra``: requests,
``inputs_total``, ``inputs_per_s``, ``prompt_tokens_per_s``); ``pooled_lines`` says
so in words where the renderers would otherwise print empty TTFT columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmload.reports.draw.fmt import fmt_ms
from llmload.reports.table.columns import RecordTable
from llmload.reports.table.schema import Summary


def pooled_stats(ok: RecordTable, duration_s: float) -> dict[str, Any]:
    """The ``pooled`` block of a phase's ok records (empty when none carried inputs)."""
    inputs = ok.num("inputs")
    sent = ~np.isnan(inputs)
    if not sent.any():
        return {}
    total = int(inputs[sent].sum())
    tokens = float(np.nansum(ok.num("prompt_tokens")[sent]))
    return {
        "requests": int(sent.sum()),
        "inputs_total": total,
        "inputs_per_s": total / duration_s,
        "prompt_tokens_per_s": tokens / duration_s,
    }


def pooled_lines(summary: Summary) -> list[str]:
    """Per phase without streams: what applies instead of the token metrics."""
    lines = []
    for name, g in summary.phases.items():
        block = g.extra.get("pooled")
        if not block:
            continue
        e2e = g.dist("e2e_ms")
        lines.append(
            f"{name}: no stream and no token (embeddings, rerank): TTFT, ITL and tokens/s do "
            f"not apply; latency is the whole response, E2E p50 {fmt_ms(e2e.p50)} / p95 "
            f"{fmt_ms(e2e.p95)} / p99 {fmt_ms(e2e.p99)} ms; {block['inputs_per_s']:.1f} "
            f"inputs/s ({block['inputs_total']} in {block['requests']} requests), "
            f"{block['prompt_tokens_per_s']:.0f} prompt tokens/s"
        )
    return lines
