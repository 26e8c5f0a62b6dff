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

``phase_blocks(records)`` is what ``reports.summary.make`` adds to each phase: only the
blocks whose records carry the data, so other runs' summaries are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.table.arraystats import stats_of
from llmload.reports.table.columns import RecordTable

MS = 1000.0


def _int_sum(values: np.ndarray) -> int:
    """The exact sum of integer counts (tokens, held as float64; steps)."""
    return int(values.astype(np.int64).sum())


def prefix_cache(records: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """The phase's prefix-cache block, or None when no successful record says what was cached.

    ``{"requests", "hit_requests", "hit_share", "prompt_tokens", "cached_tokens",
    "hit_rate", "ttft_hit_ms", "ttft_miss_ms"}`` (the TTFTs are ``MetricStats`` as JSON).
    Read from the records' columns (``reports.table.columns``; record objects are made a table).
    """
    t = RecordTable.of(records)
    prompts, cached = t.num("prompt_tokens"), t.num("cached_tokens")
    told = t.ok() & ~np.isnan(cached) & ~np.isnan(prompts) & (prompts != 0)
    n = int(told.sum())
    if not n:
        return None
    prompt, hit = _int_sum(prompts[told]), _int_sum(cached[told])
    hits = told & (cached != 0)
    ttft = t.num("ttft_s")
    return {
        "requests": n,
        "hit_requests": int(hits.sum()),
        "hit_share": int(hits.sum()) / n,
        "prompt_tokens": prompt,
        "cached_tokens": hit,
        "hit_rate": hit / prompt,
        "ttft_hit_ms": stats_of(ttft[hits], MS).to_json(),
        "ttft_miss_ms": stats_of(ttft[told & ~hits], MS).to_json(),
    }


def _mean(values: np.ndarray) -> float | None:
    """The mean of integer counts (tokens, steps), None when there are none."""
    return _int_sum(values) / len(values) if len(values) else None


def agent_sessions(records: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """The phase's agent block, or None when no record belongs to a session.

    ``{"sessions", "complete", "incomplete", "steps": {step: {"requests", "ok",
    "ttft_ms", "e2e_ms", "prompt_tokens_mean", "cached_tokens_mean"}},
    "steps_per_session_mean", "session_ms", "session_from_intended_ms"}``.
    Read from the records' columns: each session's requests ordered by step (ties in
    record order), its first and last compared at once for every session.
    """
    t = RecordTable.of(records)
    t = t.where(t.has("session_id") & ~np.isnan(t.num("step")))
    if not len(t):
        return None
    codes: dict[Any, int] = {}  # sessions in order of first appearance
    session = np.array([codes.setdefault(s, len(codes)) for s in t.text("session_id")])
    step = t.num("step").astype(np.int64)
    ok = t.ok()
    prompts, cached = t.num("prompt_tokens"), t.num("cached_tokens")
    ttft, e2e, started = t.num("ttft_s"), t.num("e2e_s"), t.num("started_at")
    per_step = {}
    for k in np.unique(step).tolist():
        mine = step == k
        good = mine & ok
        per_step[str(k)] = {
            "requests": int(mine.sum()),
            "ok": int(good.sum()),
            "ttft_ms": stats_of(ttft[good], MS).to_json(),
            "e2e_ms": stats_of(e2e[good], MS).to_json(),
            "prompt_tokens_mean": _mean(prompts[good & ~np.isnan(prompts) & (prompts != 0)]),
            "cached_tokens_mean": _mean(cached[good & ~np.isnan(cached)]),
        }
    order = np.lexsort((step, session))  # by session, then step; stable
    s, k = session[order], step[order]
    first = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    last = np.r_[first[1:], len(s)] - 1
    lengths = last - first + 1
    in_place = k == np.arange(len(k)) - np.repeat(first, lengths)  # steps 0, 1, 2, ...
    bad = ~in_place | ~ok[order]
    a, z = order[first], order[last]
    complete = (
        (np.add.reduceat(bad, first) == 0)
        & ~t.is_("finish_reason", "tool_calls")[z]
        & ~np.isnan(e2e[z])
    )
    span = (started[z] + e2e[z]) - started[a]
    times, delay = span[complete], t.num("schedule_delay_s")[a][complete]
    block: dict[str, Any] = {
        "sessions": len(codes),
        "complete": int(complete.sum()),
        "incomplete": len(codes) - int(complete.sum()),
        "steps": per_step,
        "steps_per_session_mean": _mean(lengths[complete]),
        "session_ms": stats_of(times, MS).to_json(),
    }
    timed = ~np.isnan(delay)
    if timed.any():
        block["session_from_intended_ms"] = stats_of(times[timed] + delay[timed], MS).to_json()
    return block


def phase_blocks(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """The workload blocks a phase's records support, by name (in summary.json's order)."""
    blocks = {"prefix_cache": prefix_cache(records), "agent": agent_sessions(records)}
    return {name: block for name, block in blocks.items() if block is not None}
