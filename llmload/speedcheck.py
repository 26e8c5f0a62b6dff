"""Before the measured phases: can the bundled server carry the planned load on this machine?

Machines of one kind differ up to ~4x from day to day, so the bundled engine's
speed is measured where it runs: ``engine_speed`` sends as many concurrent
streamed requests as the run has users (``ignore_eos``, a fixed length), twice,
and takes the second round's aggregate output tokens/s.  ``planned_tokens_per_s``
is what the plan asks for: requests per second (users / pacing, or the open-loop
rate) times the scenario's mean ``max_tokens`` — an upper bound, as a model may
stop early.  ``verdict`` turns the two into the lines printed before the run and
the ``bundled_server`` block of ``run.json``.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from llmload.loadtests.options import RunOptions

PROBE_TOKENS = 32
MAX_PROBE_STREAMS = 64
#: planned / speed above which queueing at peaks is likely (a note), and saturation (a warning)
NOTE_SHARE = 0.5
WARN_SHARE = 1.0


def _stream(client: httpx.Client, tokens: int, seed: int) -> int:
    body = {
        "messages": [{"role": "user", "content": "Engine speed probe: say anything."}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "seed": seed,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    used = 0
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: {") and '"usage"' in line:
                usage = json.loads(line[6:]).get("usage") or {}
                used = int(usage.get("completion_tokens") or used)
    return used


def engine_speed(
    url: str, streams: int, tokens: int = PROBE_TOKENS, timeout: float = 300.0
) -> float:
    """Aggregate output tokens/s of ``streams`` concurrent streams (second of two rounds)."""
    streams = max(1, min(streams, MAX_PROBE_STREAMS))
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    speed = 0.0
    with httpx.Client(base_url=url, timeout=timeout, limits=limits) as client:
        with ThreadPoolExecutor(max_workers=streams) as pool:
            for _round in range(2):
                t0 = time.perf_counter()
                got = list(pool.map(lambda i: _stream(client, tokens, i), range(streams)))
                speed = sum(got) / (time.perf_counter() - t0)
    return speed


def mean_max_tokens(opts: RunOptions) -> float | None:
    """The scenario's weighted mean ``max_tokens`` (None when the workload does not say)."""
    if opts.workload.max_tokens:
        return float(opts.workload.max_tokens)
    if opts.workload.dataset:
        return float(opts.workload.output_len) if opts.workload.output_len else None
    from llmload.loadtests.workload.items import BUILTIN
    from llmload.loadtests.workload.sampler import parse_mix

    try:
        weights = parse_mix(opts.workload.scenario)
    except ValueError:
        return None
    total = sum(weights.values())
    return sum(BUILTIN[n].max_tokens * w for n, w in weights.items()) / total if total else None


def planned_tokens_per_s(opts: RunOptions) -> float | None:
    """Output tokens/s the plan asks for at most (None: back-to-back or unknown)."""
    tokens = mean_max_tokens(opts)
    if tokens is None:
        return None
    if opts.load.rate:
        return opts.load.rate * tokens
    if opts.load.pacing and opts.load.pacing > 0 and not opts.load.shape:
        return opts.load.users / opts.load.pacing * tokens
    return None


def verdict(opts: RunOptions, speed: float, streams: int) -> tuple[dict[str, Any], list[str]]:
    """(``run.json`` fields, lines to print) for a measured engine speed."""
    planned = planned_tokens_per_s(opts)
    info: dict[str, Any] = {"speed_tokens_per_s": round(speed, 1), "probe_streams": streams}
    lines = [
        f"bundled server speed on this machine: {speed:,.0f} output tokens/s with {streams} "
        f"concurrent streams ({PROBE_TOKENS} tokens each)"
    ]
    if planned is None:
        lines.append("planned load: back-to-back or shaped (the server sets the pace)")
        return info, lines
    share = planned / speed if speed > 0 else float("inf")
    info |= {"planned_tokens_per_s": round(planned, 1), "planned_share": round(share, 3)}
    how = (
        f"{opts.load.rate:g} req/s"
        if opts.load.rate
        else f"{opts.load.users} users / {opts.load.pacing:g} s"
    )
    lines.append(
        f"planned load: {how} x up to {mean_max_tokens(opts):.0f} tokens "
        f"= {planned:,.0f} tokens/s, {share:.0%} of that speed"
    )
    if share > WARN_SHARE:
        lines.append(
            "warning: the planned load exceeds what the bundled server can generate on this "
            "machine: it will saturate and the latencies will measure its queue. Lower the "
            "load (--users, longer --pacing; make loadtest USERS=... PACING=...) or point "
            "--target at a faster server."
        )
    elif share > NOTE_SHARE:
        lines.append(
            "note: over half of the engine's speed: expect some queueing when requests bunch up"
        )
    return info, lines
