"""Why latency moved, in plain words, from a phase's ``server`` block (``reports.server.phase``).

Per phase:

* ``server_queue``: requests waited in the server's queue — its mean queue time
  is at least ``QUEUE_SHARE`` of the server's own TTFT and at least
  ``QUEUE_MIN_MS`` (with the waiting gauge and the KV cache as evidence);
* ``server_path``: the path added time — client minus server TTFT (means,
  exact) is at least ``PATH_MIN_MS`` and ``PATH_SHARE`` of the client's;
* ``server_kv_cache_full``: KV-cache usage reached ``KV_FULL``;
* ``server_preemptions``: the server preempted (vLLM) or retracted (SGLang)
  requests.

Across two phases of the same mode (``moved``): when the client's TTFT p95
grew at least ``GROWTH`` x and by ``GROWTH_MIN_MS``, the diagnostic names the
part that grew most — the queue, prefill, the rest of the server's TTFT, or
the path ("the server's own TTFT is flat; the path added it").
"""

from __future__ import annotations

from typing import Any

from llmload.reports.draw.fmt import fmt_ms
from llmload.reports.table.diagnostics import Diagnostic
from llmload.reports.table.schema import PhaseStats

QUEUE_SHARE = 0.25
QUEUE_MIN_MS = 10.0
PATH_MIN_MS = 20.0
PATH_SHARE = 0.2
KV_FULL = 0.95
GROWTH = 1.5
GROWTH_MIN_MS = 50.0

QUEUE_HINT = (
    "The server had more requests than it runs at once, so they queued before generation "
    "started: that wait is in every TTFT. Lower the load, or raise what the server runs at "
    "once (vLLM: --max-num-seqs, more KV-cache memory with --gpu-memory-utilization; SGLang: "
    "--max-running-requests; TGI: --max-batch-total-tokens; the bundled server: "
    "--max-concurrency), or add replicas."
)
PATH_HINT = (
    "The time is spent between the server and the client: network, a proxy or gateway, "
    "TLS, or the load generator itself (check the harness health). Run the same test straight "
    "at the server to see the path's share go away."
)
KV_HINT = (
    "The KV cache is nearly full: the server cannot admit more sequences, and long ones may "
    "be preempted. Give it more memory, shorten prompts or max_tokens, or lower the load."
)
PREEMPT_HINT = (
    "Preempted requests lose their KV cache and are recomputed or swapped later: their "
    "latency jumps. This happens when the KV cache runs out; see server_kv_cache_full."
)


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def _evidence(block: dict[str, Any]) -> str:
    """``waiting p95 37, KV cache 97 %`` (what the gauges showed)."""
    g = block.get("gauges") or {}
    parts = []
    if "waiting" in g:
        parts.append(f"waiting p95 {g['waiting']['p95']:.0f}")
    if "kv_usage" in g:
        parts.append(f"KV cache up to {_pct(g['kv_usage']['max'])}")
    return ", ".join(parts)


def phase_diagnostics(block: dict[str, Any]) -> list[Diagnostic]:
    """The server-side diagnostics of one phase."""
    out = []
    name = block["name"]
    split = block.get("ttft_split_ms") or {}
    queue, server = split.get("queue"), split.get("server")
    if queue is not None and server and queue >= max(QUEUE_MIN_MS, QUEUE_SHARE * server):
        ev = _evidence(block)
        message = (
            f"Requests waited in {name}'s queue: {fmt_ms(queue)} ms on average, "
            f"{queue / server:.0%} of the server's own {split['basis'].upper()} "
            f"({fmt_ms(server)} ms)" + (f" ({ev})" if ev else "") + "."
        )
        out.append(Diagnostic("server_queue", message, QUEUE_HINT, {"queue_ms": queue, **split}))
    path, client = split.get("path"), split.get("client")
    if path is not None and client and path >= max(PATH_MIN_MS, PATH_SHARE * client):
        message = (
            f"The path added {fmt_ms(path)} ms: the client's {split['basis'].upper()} "
            f"averaged {fmt_ms(client)} ms, {name}'s own {fmt_ms(server)} ms "
            "(network, proxy or gateway, client)."
        )
        out.append(Diagnostic("server_path", message, PATH_HINT, {"path_ms": path, **split}))
    kv = (block.get("gauges") or {}).get("kv_usage")
    if kv and kv["max"] >= KV_FULL:
        message = f"{name}'s KV cache reached {_pct(kv['max'])} (mean {_pct(kv['mean'])})."
        out.append(Diagnostic("server_kv_cache_full", message, KV_HINT, dict(kv)))
    pre = (block.get("counters") or {}).get("preemptions")
    if pre:
        message = f"{name} preempted {pre:.0f} requests in this phase."
        out.append(Diagnostic("server_preemptions", message, PREEMPT_HINT, {"preemptions": pre}))
    return out


#: the parts of the client's TTFT, in the order a sentence names them
PARTS = (
    ("queue", "requests waited in {name}'s queue"),
    ("prefill", "{name}'s prefill took longer"),
    ("server_other", "{name}'s own time besides queue and prefill grew"),
    ("path", "the server's own TTFT is flat; the path added it (proxy?)"),
)


def moved(
    before: tuple[str, PhaseStats], after: tuple[str, PhaseStats], labels: dict[str, str]
) -> Diagnostic | None:
    """``latency_moved``: the client's TTFT p95 grew from one phase to the next, and why."""
    (n0, p0), (n1, p1) = before, after
    b0, b1 = p0.extra.get("server"), p1.extra.get("server")
    if not b0 or not b1 or p0.mode != p1.mode:
        return None
    t0, t1 = p0.dist("ttft_ms").p95, p1.dist("ttft_ms").p95
    if t0 is None or t1 is None or t1 < GROWTH * t0 or t1 - t0 < GROWTH_MIN_MS:
        return None
    s0, s1 = b0.get("ttft_split_ms") or {}, b1.get("ttft_split_ms") or {}
    grew = {k: (s1.get(k) or 0.0) - (s0.get(k) or 0.0) for k, _ in PARTS}
    if not any(s1.get(k) is not None for k, _ in PARTS):
        return None
    part = max(grew, key=lambda k: grew[k])
    why = dict(PARTS)[part].format(name=b1["name"])
    ev = _evidence(b1)
    if part == "path":
        server0, server1 = s0.get("server"), s1.get("server")
        ev = f"server mean {fmt_ms(server0)} → {fmt_ms(server1)} ms"
    message = (
        f"TTFT p95 grew from {fmt_ms(t0)} to {fmt_ms(t1)} ms between {labels.get(n0, n0)} and "
        f"{labels.get(n1, n1)}: {why}" + (f" ({ev})" if ev else "") + "."
    )
    evidence = {"from": n0, "to": n1, "ttft_p95_ms": [t0, t1], "grew_ms": grew, "part": part}
    hint = PATH_HINT if part == "path" else QUEUE_HINT
    return Diagnostic("latency_moved", message, hint, evidence)
