"""The ``scale`` section of BENCHMARKS.md from the experiments' rows (no measuring here)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from bench.mdsection import machine
from bench.scale.bursts import (
    BURST_ITL_MS,
    BURST_PACING_S,
    BURST_ROUNDS,
    BURST_TOKENS,
    BURST_TTFT_MS,
    BURST_USERS,
)
from bench.scale.loadgen import CLIENT_ITL_MS, CLIENT_PATHS, UNSTAMPED
from bench.scale.server import SERVER_ITL_MS, SERVER_TOKENS, SERVER_TTFT_MS


def _client_verdict(rows: list[dict[str, Any]]) -> list[str]:
    """The goal at 1,000 streams (the default path), and http1 vs httpx per CPU-second."""

    def at(n: int, client: str) -> dict[str, Any] | None:
        return next(
            (
                r
                for r in rows
                if r.get("streams") == n and r.get("client") == client and "p99_ms" in r
            ),
            None,
        )

    out: list[str] = []
    r = at(1000, CLIENT_PATHS[0])
    if r is not None:
        verdict = "met" if r["p99_ms"] <= 5.0 else "not met"
        need = 1000 * 1000 / CLIENT_ITL_MS / max(r["per_cpu_s"], 1) * 100
        out += [
            "",
            f"Goal (1,000 streams on one client core, error ≤ 5 ms p99, {r['client']}): "
            f"**{verdict}** here (p99 {r['p99_ms']:.1f} ms). "
            f"1,000 streams at ITL {CLIENT_ITL_MS} ms are "
            f"{1000 * 1000 / CLIENT_ITL_MS:,.0f} events/s; at {r['per_cpu_s']:,.0f} events per "
            f"client CPU-second that is {need:.0f} % of a core"
            + (
                " — more than one core can give, so the error is queueing in the client."
                if need > 100
                else "."
            ),
        ]
    stamps = []
    for n in sorted({int(x["streams"]) for x in rows}):
        on, off = at(n, "http1"), at(n, UNSTAMPED)
        if on and off:
            stamps.append(f"{off['p99_ms']:.2f} → {on['p99_ms']:.2f} ms at {n:,}")
    if stamps:
        out += [
            "",
            "Client − server p99, reads timed when they return → by the kernel's receive "
            "stamps: " + ", ".join(stamps) + ".",
        ]
    ratios = []
    for n in sorted({int(x["streams"]) for x in rows}):
        http1, plain = at(n, "http1"), at(n, "httpx")
        if http1 and plain and plain["per_cpu_s"]:
            ratios.append(f"{http1['per_cpu_s'] / plain['per_cpu_s']:.2f}× at {n:,}")
    if ratios:
        out += [
            "",
            "Events per client CPU-second, http1 ÷ httpx (same streams, measured back to back): "
            + ", ".join(ratios)
            + ".",
        ]
    return out


def render(res: dict[str, Any], args: argparse.Namespace, load: str) -> str:
    """The section from ``main``'s rows: ``res`` holds ``server``, ``client`` and ``burst``
    lists and, when they ran, ``run`` and ``distributed``; ``args.window`` is the seconds
    per server row, ``load`` the load average at start ("1m 5m 15m")."""
    lines = [
        "## Scale: 1,000 streams per core, bursts, workers",
        "",
        f"`python -m bench scale` — {machine()}. Load average at start: {load}"
        + (
            f" — **the machine was busy** (other jobs on its {os.cpu_count()} cores): absolute "
            "latencies here are the machine's, not the harness's; CPU per event and the "
            "waiting-for-a-CPU columns are the steadier figures."
            if float(load.split()[0]) > 0.5 * (os.cpu_count() or 1)
            else "."
        ),
        "",
        "Profiles (py-spy flame-graph summaries of both ends at 1,000 streams and of the "
        "distributed master) and what changed because of them: `docs/scale.md`; the flame "
        "graphs themselves (server, load generator's timing path, `llmload run`, 1,000 "
        "streams each): `docs/flamegraphs/` (`python -m bench flamegraphs`).",
        "",
        "*Waiting for a CPU* = share of the wall time the process (all its threads and worker "
        "processes) was runnable but not running (`/proc/PID/task/*/schedstat`): other work "
        "on the machine holding its core. Where it is large, the latencies in that row measure "
        "the machine.",
        "",
        f"### 1. Bundled server: its own TTFT error (TTFT {SERVER_TTFT_MS} ms, ITL "
        f"{SERVER_ITL_MS} ms, {SERVER_TOKENS} tokens, {args.window:g} s per row)",
        "",
        "| streams | server processes | requests | errors | events/s | server CPU "
        "| server waiting for a CPU | CPU per event | TTFT err p50 / p99 / max |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in res["server"]:
        lines.append(
            f"| {r['streams']} | {r['workers']} | {r['requests']} | {r['errors']} "
            f"| {r['events_per_s']:,.0f} | {r['server_cpu']:.0f} % | {r['server_wait']:.0f} % "
            f"| {r['us_per_event']:.0f} µs "
            f"| {r['p50']:+.2f} / {r['p99']:+.2f} / {r['max']:+.2f} ms |"
        )
    goal = [r for r in res["server"] if r["streams"] >= 1000 and r["workers"] == 1]
    if goal:
        r = goal[0]
        verdict = "met" if r["p99"] <= 2.0 else "not met"
        lines += [
            "",
            "Goal (1,000 streams, one process, TTFT error ≤ 2 ms p99): "
            f"**{verdict}** here (p99 {r['p99']:+.2f} ms)"
            + (
                ""
                if verdict == "met"
                else f" — at {r['us_per_event']:.0f} µs per event (request handling "
                f"included) 1,000 streams × {1000 / SERVER_ITL_MS:.0f} events/s need "
                f"{r['us_per_event'] * 1000 * (1000 / SERVER_ITL_MS) / 1e4:.0f} % of a core; "
                f"the server process got {r['server_cpu']:.0f} % of one and waited for a CPU "
                f"{r['server_wait']:.0f} % of the window"
                + (": the error is that wait." if r["server_wait"] >= 10 else ".")
            ),
        ]
    lines += [
        "",
        f"### 2. Load generator on one client core (reference server, ITL {CLIENT_ITL_MS} ms, "
        "16 tokens, `bench harness` child; the client paths interleaved)",
        "",
        "`http1`: `loadtests.transport.http1`, llmload's default, its reads timed by the kernel's "
        "receive stamps; `http1, reads unstamped`: the same with `LLMLOAD_RECV_STAMPS=0`, "
        "each read timed when it returns (before those stamps); `httpx`: `--http-client "
        "httpx` (reads timed when they return). The reference server stamps its first token "
        "after its write returns and the kernel stamps the data during that write, so a "
        "stamped client − server figure can be a few µs below zero.",
        "",
        "| streams | client | requests | client − server p50 / p99 | SSE events/s | client CPU "
        "| client waiting for a CPU | events per client CPU-s |",
        "|---:|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in res["client"]:
        who = r.get("client", "?")
        if "error" in r:
            lines.append(f"| {r['streams']} | {who} | – | failed: {r['error'][:80]} | | | | |")
            continue
        lines.append(
            f"| {r['streams']} | {who} | {r['requests']} "
            f"| {r['p50_ms']:.2f} / {r['p99_ms']:.2f} ms "
            f"| {r['events_per_s']:,.0f} | {r['client_cpu']:.0f} % | {r['client_wait']:.0f} % "
            f"| {r['per_cpu_s']:,.0f} |"
        )
    lines += _client_verdict(res["client"])
    lines += _run_path_lines(res.get("run"))
    lines += [
        "",
        f"### 3. Bursts of {BURST_USERS} (TTFT {BURST_TTFT_MS} ms, ITL {BURST_ITL_MS} ms, "
        f"{BURST_TOKENS} tokens, pacing {BURST_PACING_S:g} s, {BURST_ROUNDS - 1} measured rounds)",
        "",
        "`together`: every user's request starts at the same instant each interval "
        "(`--first-start together`, lock-step); `spread`: each user's first start at a seeded "
        "uniform offset inside one interval (`llmload run`'s default). Client − server TTFT: "
        "both servers' own TTFT counts from the request's arrival, so the difference is what "
        "the harness adds on both sides (building and sending 20 requests at once, reading 20 "
        "first tokens at once) plus loopback transport (both stamp arrival as the request's "
        "headers are parsed).",
        "",
        "| server | first starts | requests | client − server p50 / p99 / max |",
        "|---|---|---:|---|",
    ]
    for r in res["burst"]:
        if "error" in r:
            lines.append(f"| {r['server']} | {r['mode']} | – | failed |")
            continue
        lines.append(
            f"| {r['server']} | {r['mode']} | {r['n']} "
            f"| {r['p50']:.2f} / {r['p99']:.2f} / {r['max']:.2f} ms |"
        )
    d = res.get("distributed")
    if d:
        lines += [
            "",
            f"### 4. Distributed: `llmload run --workers {d['workers']}`, {d['users']} users "
            "back to back, bundled server (TTFT 50 ms, ITL 50 ms, 16 tokens)",
            "",
            f"Records written {d['records']:,}, requests the server counted {d['served']:,}, "
            f"lost {d['lost']} (lost workers {d['lost_workers']}), exit code {d['rc']}. The "
            f"master's CPU: {d['master_cpu_s']:.1f} s for the whole run, "
            f"{d['small']['master_cpu_s']:.1f} s for a run of the same length with "
            f"{d['small']['users']} users ({d['small']['records']:,} records): "
            f"**{d['us_per_record']:.0f} µs per extra record** it received (start notice, "
            "record, writer) — at that cost one master core takes "
            f"{1e6 / d['us_per_record']:,.0f} records/s"
            if d["records"]
            else f"No records (exit {d['rc']}): {d['stderr']}",
        ]
        if d["records"]:
            per_s = 1e6 / d["us_per_record"]
            lines[-1] += (
                f". 10,000 streams whose requests last D seconds send 10,000 / D records/s: "
                f"the master stays under one core for D ≥ {10_000 / per_s:.1f} s (e.g. 10 s "
                f"requests, 200 tokens at 50 ms: {10_000 / 10 / per_s * 100:.0f} % of a core). "
                + _worker_cores(res["client"])
                + " This 2-core machine cannot host them, so the 10,000 figures are this "
                "extrapolation, not a measurement."
            )
    return "\n".join(lines)


def _run_path_lines(r: dict[str, Any] | None) -> list[str]:
    """Section 2's goal on the path users run: ``llmload run`` at 1,000 users."""
    if not r:
        return []
    head = [
        "",
        f"The same on `llmload run`'s own path (locust's runner, the users, the run writer and "
        f"status line, the collector policy), {r['users']:,} users spawned together and back "
        "to back, 16 tokens, reference server, pinned to one core:",
        "",
    ]
    if not r["records"]:
        return [*head, f"No records (exit {r['rc']}): {r['stderr']}"]
    return [
        *head,
        "| records | errors | client − server p50 / p99, whole phase | "
        f"after its first {r['steady_after']:g} s | client CPU p50 | loop lag p99 |",
        "|---:|---:|---|---|---:|---:|",
        f"| {r['records']:,} | {r['errors']} | {r['p50']:.1f} / {r['p99']:.1f} ms "
        f"| {r['steady_p50']:.1f} / {r['steady_p99']:.1f} ms ({r['steady_n']:,} requests) "
        f"| {r['cpu_p50']:.0f} % | {r['lag_p99']:.1f} ms |",
        "",
        "The whole phase includes the start: 1,000 users spawned in one batch, their first "
        "requests spread over that second (`--first-start spread`), 1,000 new connections. "
        "Without the harness child's `x-bench-t0` header the reference server counts its TTFT "
        "from its own read of the request, as any server does: this figure includes the "
        "request's way in (the client's send, the server's read on its own busy core). "
        "The run's own health (CPU, loop lag) is what its report's trust box reads.",
        "",
        f"Goal (≤ 5 ms p99) on this path: **{'met' if r['p99'] <= 5.0 else 'not met'}** here "
        f"(whole phase {r['p99']:.1f} ms, after {r['steady_after']:g} s "
        f"{r['steady_p99']:.1f} ms).",
    ]


def _worker_cores(client_rows: list[dict[str, Any]]) -> str:
    """How many worker cores 10,000 streams at ITL 50 ms take, from section 2's http1 rows."""
    http1 = [r for r in client_rows if r.get("client") == "http1" and r.get("per_cpu_s")]
    if not http1:
        return ""
    top = max(http1, key=lambda r: r["streams"])
    events = 10_000 * 1000 / CLIENT_ITL_MS
    return (
        f"The streams themselves, 10,000 at ITL {CLIENT_ITL_MS} ms ({events:,.0f} events/s), "
        f"take {events / top['per_cpu_s']:.1f} worker cores at the http1 client's "
        f"{top['per_cpu_s']:,.0f} events per CPU-second (section 2, {top['streams']:,} "
        "streams, the bench child: `llmload run`'s own path costs more per request, see the "
        "row under section 2; on a machine 4× slower per core, 4× as many)."
    )
