"""A phase's ``server`` block in ``summary.json``: what the target's own metrics said then.

Shape (every latency in ms; a quantile is ``{"value", "lo", "hi"}``, its bucket —
``reports.server.histogram``)::

    {"server": "vllm", "name": "vLLM",
     "window": {"from": t, "to": t, "exact": true},     # the full scrapes bounding it
     "latency": {"queue": {"n", "mean", "p50", "p90", "p95", "p99"}, "ttft": ..., ...},
     "ttft_split_ms": {"queue", "prefill", "server_other", "path", "client"},
     "gauges": {"running": {"mean", "max"}, "waiting": {"mean", "p95", "max", "busy_share"},
                "kv_usage": {"mean", "max"}, "prefix_hit_rate": {"mean"}},
     "counters": {"preemptions": n, "prompt_tokens": n, "generation_tokens": n},
     "prefix_cache_hit_rate": share or None,
     "scrapes": n, "missing": [roles the server has that no scrape held]}

``exact`` is true when both ends are the scrapes taken at the phase's own start
and end (``mark``); otherwise the nearest full scrapes outside the phase are
used and the block counts a little of what happened next to it.  The path is
client − server: TTFT for a streamed phase (means: exact), E2E for a sync one
(the client sees nothing before the whole body).
"""

from __future__ import annotations

from typing import Any

from llmload.loadtests import serverfamilies
from llmload.loadtests.percentile import percentile_of
from llmload.reports.server.histogram import Delta, delta, stats
from llmload.reports.table.schema import PhaseStats
from llmload.reports.table.scrapes import Scrape, ServerRun

HISTOGRAM_ROLES = ("queue", "prefill", "decode", "inference", "ttft", "itl", "tpot", "e2e")
GAUGE_ROLES = ("running", "waiting", "kv_usage", "prefix_hit_rate")
COUNTER_ROLES = ("preemptions", "prompt_tokens", "generation_tokens")


def window(sr: ServerRun, name: str, t0: float, t1: float) -> tuple[Scrape, Scrape, bool] | None:
    """The full scrapes at a phase's start and end, and whether they are its own (``mark``)."""
    full = sr.full()
    start = next((s for s in full if f"start {name}" in s.marks), None)
    end = next((s for s in full if f"end {name}" in s.marks and s.t >= t0), None)
    exact = start is not None and end is not None
    if start is None:
        start = next((s for s in reversed(full) if s.t <= t0), None)
    if end is None:
        end = next((s for s in full if s.t >= t1), None)
    if start is None or end is None or end.t <= start.t:
        return None
    return start, end, exact


def family_for(server: serverfamilies.Server, role: str, have: set[str]) -> str | None:
    """The first family playing ``role`` that the scrapes hold."""
    return next((f.name for f in server.for_role(role) if f.name in have), None)


def role_delta(server: serverfamilies.Server, role: str, a: Scrape, b: Scrape) -> Delta | None:
    """A histogram role's delta from ``a`` to ``b`` (a family that appears only in ``b`` had
    no series yet at ``a``: a labelled family shows none before its first observation)."""
    name = family_for(server, role, set(b.sample.histograms))
    if name is None:
        return None
    return delta(a.sample.histograms.get(name), b.sample.histograms[name])


def gauge(scrape: Scrape, name: str, role: str) -> float:
    """A gauge's value in one scrape: summed over series, averaged for a ratio role."""
    value = scrape.sample.values[name]
    if role in serverfamilies.RATIO_ROLES:
        value /= scrape.sample.series.get(name, 1)
    return value


def _gauges(server: serverfamilies.Server, inside: list[Scrape]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    have = {n for s in inside for n in s.sample.values}
    for role in GAUGE_ROLES:
        name = family_for(server, role, have)
        if name is None:
            continue
        xs = [gauge(s, name, role) for s in inside if name in s.sample.values]
        if not xs:
            continue
        block: dict[str, Any] = {"mean": sum(xs) / len(xs), "max": max(xs)}
        if role == "waiting":
            block["p95"] = percentile_of(xs, 95)
            block["busy_share"] = sum(x > 0 for x in xs) / len(xs)
        out[role] = block
    return out


def _counter(server: serverfamilies.Server, role: str, a: Scrape, b: Scrape) -> float | None:
    name = family_for(server, role, set(b.sample.values))
    if name is None:
        return None
    return max(0.0, b.sample.values[name] - a.sample.values.get(name, 0.0))


def phase_block(
    sr: ServerRun, name: str, t0: float, t1: float, client: PhaseStats
) -> dict[str, Any] | None:
    """The ``server`` block of one phase (None: no scrape brackets it)."""
    server = sr.server()
    bounds = window(sr, name, t0, t1)
    if server is None or bounds is None:
        return None
    a, b, exact = bounds
    latency: dict[str, Any] = {}
    deltas: dict[str, Delta] = {}
    for role in HISTOGRAM_ROLES:
        d = role_delta(server, role, a, b)
        if d is not None and d.count > 0:
            deltas[role] = d
            latency[role] = stats(d)
    inside = sr.between(t0, t1) or [b]
    counters = {r: v for r in COUNTER_ROLES if (v := _counter(server, r, a, b)) is not None}
    hits = _counter(server, "prefix_hits", a, b)
    queries = _counter(server, "prefix_queries", a, b)
    have = sr.names()
    missing = [r for r in server.roles if family_for(server, r, have) is None]
    return {
        "server": server.key,
        "name": server.name,
        "window": {"from": a.t, "to": b.t, "exact": exact},
        "latency": latency,
        "ttft_split_ms": ttft_split(deltas, client),
        "gauges": _gauges(server, inside),
        "counters": counters,
        "prefix_cache_hit_rate": hits / queries if hits is not None and queries else None,
        "scrapes": len(inside),
        "missing": missing,
    }


def _mean_ms(deltas: dict[str, Delta], role: str) -> float | None:
    d = deltas.get(role)
    return None if d is None or d.mean is None else d.mean * 1000.0


def ttft_split(deltas: dict[str, Delta], client: PhaseStats) -> dict[str, Any]:
    """Where the client's time to first token (sync: its whole response) went, in mean ms:
    the server's queue, its prefill, the rest of its own TTFT, and the path (client − server)."""
    stream = client.mode != "sync"
    server_total = _mean_ms(deltas, "ttft" if stream else "e2e")
    client_total = client.dist("ttft_ms" if stream else "e2e_ms").mean
    queue, prefill = _mean_ms(deltas, "queue"), _mean_ms(deltas, "prefill")
    other = None
    if server_total is not None:
        other = server_total - (queue or 0.0) - (prefill or 0.0)
        if not stream:
            other -= _mean_ms(deltas, "decode") or 0.0
    path = None
    if server_total is not None and client_total is not None:
        path = client_total - server_total
    return {
        "basis": "ttft" if stream else "e2e",
        "client": client_total,
        "server": server_total,
        "queue": queue,
        "prefill": prefill,
        "decode": None if stream else _mean_ms(deltas, "decode"),
        "server_other": other,
        "path": path,
    }
