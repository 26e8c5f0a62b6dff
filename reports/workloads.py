"""Per-phase blocks for the field's workloads, from the records (``PhaseStats.extra``).

``prefix_cache``: what the target's prefix cache served, from each record's
``cached_tokens`` (``usage.prompt_tokens_details.cached_tokens``; present only when
the server reports it): the token hit rate — cached over prompt tokens, what vLLM's
``prefix_cache_hits / prefix_cache_queries`` give — the share of requests that hit
(any cached token), and TTFT split by hit and miss.

``agent``: agent sessions (``--dataset agent``), from each record's ``session_id``
and ``step``: per step the requests, their TTFT (it grows with the history the
step carries), prompt and cached tokens; per session the steps it took and the
time to its final answer — from its first request's start (open loop: from its
intended send time too) to the end of the answer that made no tool call.  A
session is complete when every step succeeded and its last answer is a final
one (``finish_reason`` other than ``tool_calls``); the others (a failed step, or
cut by the phase's end) are counted, not timed.

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


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def agent_sessions(records: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """The phase's agent block, or None when no record belongs to a session.

    ``{"sessions", "complete", "incomplete", "steps": {step: {"requests", "ok",
    "ttft_ms", "e2e_ms", "prompt_tokens_mean", "cached_tokens_mean"}},
    "steps_per_session_mean", "session_ms", "session_from_intended_ms"}``.
    """
    by_session: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.session_id is not None and r.step is not None:
            by_session.setdefault(r.session_id, []).append(r)
    if not by_session:
        return None
    steps: dict[int, list[RequestRecord]] = {}
    for recs in by_session.values():
        for r in recs:
            steps.setdefault(r.step or 0, []).append(r)
    per_step = {}
    for step in sorted(steps):
        recs = steps[step]
        ok = [r for r in recs if r.ok]
        cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
        per_step[str(step)] = {
            "requests": len(recs),
            "ok": len(ok),
            "ttft_ms": MetricStats.of((r.ttft_s for r in ok), MS).to_json(),
            "e2e_ms": MetricStats.of((r.e2e_s for r in ok), MS).to_json(),
            "prompt_tokens_mean": _mean([r.prompt_tokens for r in ok if r.prompt_tokens]),
            "cached_tokens_mean": _mean(cached),
        }
    times, intended, lengths = [], [], []
    for recs in by_session.values():
        recs.sort(key=lambda r: r.step or 0)
        first, last = recs[0], recs[-1]
        complete = (
            first.step == 0
            and [r.step for r in recs] == list(range(len(recs)))
            and all(r.ok for r in recs)
            and last.finish_reason != "tool_calls"
            and last.e2e_s is not None
        )
        if not complete:
            continue
        lengths.append(len(recs))
        span = last.started_at + (last.e2e_s or 0.0) - first.started_at
        times.append(span)
        if first.schedule_delay_s is not None:
            intended.append(span + first.schedule_delay_s)
    block: dict[str, Any] = {
        "sessions": len(by_session),
        "complete": len(times),
        "incomplete": len(by_session) - len(times),
        "steps": per_step,
        "steps_per_session_mean": _mean(lengths),
        "session_ms": MetricStats.of(times, MS).to_json(),
    }
    if intended:
        block["session_from_intended_ms"] = MetricStats.of(intended, MS).to_json()
    return block


def phase_blocks(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """The workload blocks a phase's records support, by name (in summary.json's order)."""
    blocks = {"prefix_cache": prefix_cache(records), "agent": agent_sessions(records)}
    return {name: block for name, block in blocks.items() if block is not None}
