"""The server's side beside the client's where two runs meet: ``report compare`` and the gate.

``rows(a, b)`` gives a phase's server rows, and its GPU rows (energy per token), for
``report compare`` (values, not text: ``report compare`` formats them as its own
rows).  ``mode_means(run)`` is what a baseline keeps of the server per mode (exact
means, from the histogram sums), and ``gate_lines`` what the gate prints beside its
verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from llmload.reports.server.phase import role_delta, window
from llmload.reports.table.arraystats import exact_sum
from llmload.reports.table.loader import Run
from llmload.reports.table.schema import PhaseStats

Getter = Callable[[dict[str, Any]], float | None]


def _at(*path: str) -> Getter:
    def get(block: dict[str, Any]) -> float | None:
        value: Any = block
        for key in path:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return value if isinstance(value, int | float) else None

    return get


#: (label, getter on a phase's server block, kind, lower is better)
ROWS: list[tuple[str, Getter, str, bool | None]] = [
    ("server TTFT mean (ms)", _at("latency", "ttft", "mean"), "ms", True),
    (
        "server TTFT p95 (ms, bucket-interpolated)",
        _at("latency", "ttft", "p95", "value"),
        "ms",
        True,
    ),
    ("server queue mean (ms)", _at("latency", "queue", "mean"), "ms", True),
    ("server prefill mean (ms)", _at("latency", "prefill", "mean"), "ms", True),
    ("server ITL mean (ms)", _at("latency", "itl", "mean"), "ms", True),
    ("path: client − server mean (ms)", _at("ttft_split_ms", "path"), "ms", True),
    ("server waiting p95", _at("gauges", "waiting", "p95"), "rate", True),
    ("server KV cache max", _at("gauges", "kv_usage", "max"), "pct", True),
    ("server preemptions", _at("counters", "preemptions"), "int", True),
]


#: the same, on a phase's ``gpu`` block (``reports.server.gpu``); ``num``: three figures
GPU_ROWS: list[tuple[str, Getter, str, bool | None]] = [
    ("GPU joules per output token", _at("joules_per_output_token"), "num", True),
    ("GPU output tokens per joule", _at("output_tokens_per_joule"), "num", False),
    ("GPU energy (J)", _at("energy_j"), "num", True),
    ("GPU power mean (W, all GPUs)", _at("all", "power_w_mean"), "num", True),
    ("GPU watts per request in flight", _at("watts_per_request_in_flight"), "num", True),
    ("GPU utilization mean (%)", _at("all", "util_pct_mean"), "num", None),
]


def rows(
    a: PhaseStats, b: PhaseStats
) -> list[tuple[str, float | None, float | None, str, bool | None]]:
    """A phase's server and GPU rows present in either run: (label, A, B, kind, lower is
    better)."""
    out = []
    for block, table in (("server", ROWS), ("gpu", GPU_ROWS)):
        sa, sb = a.extra.get(block) or {}, b.extra.get(block) or {}
        for label, get, kind, lower in table:
            va, vb = get(sa), get(sb)
            if va is not None or vb is not None:
                out.append((label, va, vb, kind, lower))
    return out


def mode_means(run: Run) -> dict[str, dict[str, float]]:
    """Per mode, the server's exact means over the measured phases: TTFT, queue, E2E (ms), and
    how many requests it counted."""
    sr = run.server
    server = sr.server() if sr is not None else None
    if sr is None or server is None:
        return {}
    sums: dict[str, dict[str, list[float]]] = {}
    for ph in run.meta.get("phases") or []:
        if not isinstance(ph, dict) or ph.get("name") == "warmup" or ph.get("ended_at") is None:
            continue
        bounds = window(sr, str(ph["name"]), float(ph["started_at"]), float(ph["ended_at"]))
        if bounds is None:
            continue
        a, b, _ = bounds
        acc = sums.setdefault(str(ph.get("mode")), {})
        for role in ("ttft", "queue", "e2e"):
            d = role_delta(server, role, a, b)
            if d is not None and d.count > 0:
                n, s = acc.get(role, [0.0, 0.0])
                acc[role] = [n + d.count, s + d.sum]
    out: dict[str, dict[str, float]] = {}
    for mode, acc in sums.items():
        block = {f"{r}_mean_ms": s / n * 1000 for r, (n, s) in acc.items() if n}
        t = run.records
        client = t.num("ttft_s")[t.ok() & t.is_("mode", mode) & ~t.warmup()]
        client = client[~np.isnan(client)]
        if len(client) and "ttft_mean_ms" in block and mode == "stream":
            block["path_mean_ms"] = exact_sum(client) / len(client) * 1000 - block["ttft_mean_ms"]
        block["server"] = server.name  # type: ignore[assignment]  # the block is float-valued but for the server's name
        out[mode] = block
    return out


def _ms(v: Any) -> str:
    return "–" if not isinstance(v, int | float) else f"{v:.0f}"


def gate_lines(run: Run, baseline: dict[str, Any], modes: list[str]) -> list[str]:
    """``server side (vLLM), stream: TTFT mean 180 → 910 ms, queue mean 5 → 700 ms, ...``
    (baseline → run); empty when neither run scraped a server llmload knows."""
    now = mode_means(run)
    before = baseline.get("server") or {}
    out = []
    for mode in modes:
        b, r = before.get(mode) or {}, now.get(mode) or {}
        if not b and not r:
            continue
        name = r.get("server") or b.get("server")
        parts = []
        for key, label in (
            ("ttft_mean_ms", "TTFT mean"),
            ("queue_mean_ms", "queue mean"),
            ("path_mean_ms", "path (client − server) mean"),
        ):
            if key in b or key in r:
                parts.append(f"{label} {_ms(b.get(key))} → {_ms(r.get(key))} ms")
        if parts:
            out.append(
                f"server side ({name}'s /metrics), {mode}, baseline → run: " + ", ".join(parts)
            )
    return out
