"""Per-phase blocks for the field's workloads, from the records (``PhaseStats.extra``).

``prefix_cache``: what the target's prefix cache served, from each record's
``cached_tokens`` (``usage.prompt_tokens_details.cached_tokens``; present only when
the server reports it): the token hit rate — cached over prompt tokens, what vLLM's
``prefix_cache_hits / prefix_cache_queries`` give — the share of requests that hit
(any cached token), and TTFT split by hit and miss.

``phase_blocks(records)`` is what ``reports.summary`` adds to each phase: only the
blocks whose records carry the data, so other runs' summaries are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.schema import MetricStats

MS = 1000.0


def prefix_cache(records: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """The phase's prefix-cache block, or None when no successful record says what was cached.

    ``{"requests", "hit_requests", "hit_share", "prompt_tokens", "cached_tokens",
    "hit_rate", "ttft_hit_ms", "ttft_miss_ms"}`` (the TTFTs are ``MetricStats`` as JSON).
    """
    told = [r for r in records if r.ok and r.cached_tokens is not None and r.prompt_tokens]
    if not told:
        return None
    prompt = sum(r.prompt_tokens or 0 for r in told)
    cached = sum(r.cached_tokens or 0 for r in told)
    hits = [r for r in told if r.cached_tokens]
    misses = [r for r in told if not r.cached_tokens]
    return {
        "requests": len(told),
        "hit_requests": len(hits),
        "hit_share": len(hits) / len(told),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "hit_rate": cached / prompt,
        "ttft_hit_ms": MetricStats.of((r.ttft_s for r in hits), MS).to_json(),
        "ttft_miss_ms": MetricStats.of((r.ttft_s for r in misses), MS).to_json(),
    }


def phase_blocks(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """The workload blocks a phase's records support, by name (in summary.json's order)."""
    blocks = {"prefix_cache": prefix_cache(records)}
    return {name: block for name, block in blocks.items() if block is not None}
