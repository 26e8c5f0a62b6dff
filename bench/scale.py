"""``python -m bench scale``: where precision ends at scale, both ends, side by side in one run.

1. **Bundled server at 1,000 streams** (TTFT 100 ms, ITL 50 ms, 40 tokens): its own
   TTFT error (``x_llmload.ttft_s`` − configured) and CPU per SSE event, one
   process and ``--workers 2``; the client is ``bench.server_timing``'s lean
   asyncio raw-socket loop.
2. **Load generator at 20 / 200 / 1,000 streams on one client core** against the
   reference server (``bench/harness_server.py``, ITL 50 ms): client TTFT − the
   server's stamp of its first-token write (``bench harness``'s child under gevent),
   and SSE events per client CPU-second — the lean client (``loadtests.transport.http1``, the
   default) and httpx (``--http-client httpx``) interleaved, row by row.
3. **Bursts of 20**: 20 users with a 1 s start-to-start pacing whose requests start
   together every interval (``--first-start together``) or at seeded offsets
   (``spread``, the default), against both servers at TTFT 200 ms / ITL 20 ms:
   client − server TTFT per request.
4. **Distributed**: ``llmload run --workers N`` against the bundled server (one
   process, so its counters are complete): records written vs requests the server
   counted (0 lost), and the master's CPU per record it received from the workers.

Every figure comes with the machine line, the calibration and the load average at
start; goals not met on this machine are said so in the section, with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from bench.mdsection import machine, write_section
from llmload.loadtests.percentile import percentile_of
from llmload.target_server.launch import launch

ROOT = Path(__file__).resolve().parent.parent
SERVER_TTFT_MS, SERVER_ITL_MS, SERVER_TOKENS = 100, 50, 40
CLIENT_ITL_MS = 50
#: the load generator's two HTTP paths, measured interleaved (lean first: the default)
CLIENT_PATHS = ("lean", "lean, reads unstamped", "httpx")
#: the lean client with its reads timed when they return, not by the kernel's receive stamps
UNSTAMPED = CLIENT_PATHS[1]
BURST_USERS, BURST_PACING_S, BURST_ROUNDS = 20, 1.0, 11
BURST_TTFT_MS, BURST_ITL_MS, BURST_TOKENS = 200, 20, 16


def _pct(values: list[float], q: float) -> float:
    v = percentile_of(values, q)
    return float("nan") if v is None else v


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _tree_cpu(proc: psutil.Process) -> float:
    """CPU seconds of a process and its children (a ``--workers`` server)."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            continue
    return total


# -- 1. the bundled server ------------------------------------------------------------------


def server_row(streams: int, workers: int, window: float) -> dict[str, Any]:
    """One bundled server (``workers`` processes), ``streams`` raw-socket streams against it."""
    from bench.server_timing import run_level, runqueue_wait_s

    args = ["--log-level", "warning", "--ttft-ms", str(SERVER_TTFT_MS)]
    args += ["--itl-ms", str(SERVER_ITL_MS), "--workers", str(workers)]
    with launch(args, cwd=ROOT, ready_timeout=60) as server:
        proc = psutil.Process(server.proc.pid)
        pids = [proc.pid, *(c.pid for c in proc.children(recursive=True))]
        cpu0, wait0 = _tree_cpu(proc), sum(runqueue_wait_s(p) for p in pids)
        lv = asyncio.run(run_level(server.url, streams, SERVER_TOKENS, window))
        cpu = _tree_cpu(proc) - cpu0
        wait = sum(runqueue_wait_s(p) for p in pids) - wait0
    err = [v * 1000 - SERVER_TTFT_MS for v in lv.ttft_server]
    return {
        "streams": streams,
        "workers": workers,
        "requests": len(err),
        "errors": lv.errors,
        "events_per_s": lv.events / lv.wall,
        "server_cpu": 100 * cpu / lv.wall,
        "server_wait": 100 * wait / lv.wall,
        "us_per_event": cpu / lv.events * 1e6 if lv.events else float("nan"),
        "p50": _pct(err, 50),
        "p99": _pct(err, 99),
        "max": max(err, default=float("nan")),
    }


# -- 2. the load generator ------------------------------------------------------------------


def client_row(streams: int, client: str = "lean") -> dict[str, Any]:
    """``bench harness``'s child (``client``: one of ``CLIENT_PATHS``) at ``streams``
    against the reference server (ITL 50 ms).

    Also how long the child was runnable but not running (``schedstat``): on a shared
    machine that, not the client's work, is what its latency then shows.
    """
    from bench.harness import _reference
    from bench.server_timing import runqueue_wait_s

    env = {**os.environ, "LLMLOAD_RECV_STAMPS": "0" if client == UNSTAMPED else "1"}
    proc, url = _reference(CLIENT_ITL_MS)
    try:
        cmd = [sys.executable, "-m", "bench.harness", "--child", client.split(",")[0], url]
        cmd += [str(streams), str(CLIENT_ITL_MS)]
        t0 = time.monotonic()
        child = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        wait = 0.0
        while child.poll() is None:
            wait = runqueue_wait_s(child.pid) or wait
            time.sleep(0.2)
        out, err = child.communicate(timeout=120)
        wall = time.monotonic() - t0
    finally:
        proc.terminate()
        proc.wait(10)
    if child.returncode != 0:
        return {"streams": streams, "client": client, "error": err.strip()[-300:]}
    r: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    r["client"] = client
    cpu = r.get("client_cpu") or float("nan")
    r["per_cpu_s"] = r.get("events_per_s", 0) / (cpu / 100) if cpu == cpu and cpu else 0.0
    r["client_wait"] = 100 * wait / wall
    print(json.dumps(r), flush=True)
    return r


# -- 3. bursts ------------------------------------------------------------------------------


def _burst_child(url: str, first_start: str) -> dict[str, Any]:
    """(gevent child) 20 closed-loop users, 1 s pacing; client − server TTFT per request."""
    from bench.client import gevent_client

    setup = gevent_client(url, BURST_TOKENS)
    import gevent

    from llmload.loadtests.measure.timing import RecordMeta, StreamTimer
    from llmload.loadtests.run.shapes import first_start_offset
    from llmload.loadtests.transport.target import clock, perform

    meta = RecordMeta("x", "bench", "bench", "stream", setup.adapter.endpoint, 0.0)
    gaps: list[float] = []
    start = clock() + 0.2

    def user(i: int) -> None:
        sess = setup.target.user_client()
        offset = 0.0 if first_start == "together" else first_start_offset(0, i, BURST_PACING_S)
        for k in range(BURST_ROUNDS):
            gevent.sleep(max(0.0, start + offset + k * BURST_PACING_S - clock()))
            timer = StreamTimer(setup.adapter, clock())
            perform(sess, setup.target, setup.call, timer)
            rec = timer.finish(clock(), meta)
            if k and rec.ok and rec.ttft_s and rec.server_ttft_s:  # round 0 warms up
                gaps.append((rec.ttft_s - rec.server_ttft_s) * 1000)

    gevent.joinall([gevent.spawn(user, i) for i in range(BURST_USERS)])
    return {"n": len(gaps), "p50": _pct(gaps, 50), "p99": _pct(gaps, 99), "max": max(gaps)}


def burst_rows() -> list[dict[str, Any]]:
    """Both servers at TTFT 200 ms / ITL 20 ms, both first-start modes."""
    rows: list[dict[str, Any]] = []
    ref = [str(BURST_TTFT_MS), str(BURST_ITL_MS)]
    bundled = ["--log-level", "warning", "--ttft-ms", str(BURST_TTFT_MS)]
    bundled += ["--itl-ms", str(BURST_ITL_MS)]
    for name, module, args in (
        ("reference", "bench.harness_server", ref),
        ("bundled", "llmload.target_server", bundled),
    ):
        server = launch(
            args,
            module=module,
            cwd=ROOT,
            loopback=module == "llmload.target_server",
            health=module == "llmload.target_server",
        )
        try:
            for mode in ("together", "spread"):
                cmd = [sys.executable, "-m", "bench.scale", "--burst-child", server.url, mode]
                out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
                if out.returncode != 0:
                    rows.append({"server": name, "mode": mode, "error": out.stderr[-300:]})
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append({"server": name, "mode": mode, **r})
                print(json.dumps(rows[-1]), flush=True)
        finally:
            server.stop()
    return rows


# -- 4. distributed -------------------------------------------------------------------------


def _server_requests(url: str) -> int:
    import httpx

    text = httpx.get(url + "/metrics", timeout=30).text
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("llmserve_requests_total{")
        )
    )


def run_path(users: int, duration: str, steady_after: float = 10.0) -> dict[str, Any]:
    """``llmload run`` itself — locust's runner, the users, the writer, the status line and
    the collector policy — at ``users`` back to back against the reference server (ITL
    50 ms, 16 tokens), pinned to one core as the bench child is: client − server TTFT from
    its records, over the whole phase and from ``steady_after`` s on (the users are
    spawned together, so the first requests go out as one burst), and its own health."""
    from bench.harness import _reference

    proc, url = _reference(CLIENT_ITL_MS)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            cmd = [sys.executable, "-m", "llmload", "run", "--target", url]
            cmd += ["--users", str(users), "--spawn-rate", str(users), "--pacing", "0s"]
            cmd += ["--modes", "stream", "--warmup", "0s", "--duration", duration]
            cmd += ["--max-tokens", "16", "--ignore-eos", "--no-report", "--out", str(out)]
            run = subprocess.run(
                cmd,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=300,
                preexec_fn=lambda: os.sched_setaffinity(0, {0}),
            )
            lines = (out / "requests.jsonl").read_text().splitlines() if out.exists() else []
            info = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    finally:
        proc.terminate()
        proc.wait(10)
    records = [json.loads(x) for x in lines if x.strip()]
    ok = [r for r in records if r.get("status") == "ok" and r.get("server_ttft_s")]
    began = min((r["started_at"] for r in ok), default=0.0)
    diff = [(r["ttft_s"] - r["server_ttft_s"]) * 1000 for r in ok]
    steady = [d for d, r in zip(diff, ok, strict=True) if r["started_at"] >= began + steady_after]
    phases = info.get("phases") or [{}]
    local = ((phases[-1].get("health") or {}).get("processes") or {}).get("local") or {}
    return {
        "users": users,
        "rc": run.returncode,
        "records": len(records),
        "errors": len(records) - len(ok),
        "p50": _pct(diff, 50),
        "p99": _pct(diff, 99),
        "steady_after": steady_after,
        "steady_n": len(steady),
        "steady_p50": _pct(steady, 50),
        "steady_p99": _pct(steady, 99),
        "cpu_p50": local.get("cpu_p50", float("nan")),
        "lag_p99": local.get("lag_p99_ms", float("nan")),
        "stderr": run.stderr[-300:] if run.returncode else "",
    }


def distributed(users: int, workers: int, duration: str) -> dict[str, Any]:
    """One distributed run; the master's CPU sampled until it exits."""
    args = ["--log-level", "warning", "--ttft-ms", "50", "--itl-ms", "50"]
    with launch(args, cwd=ROOT, ready_timeout=60) as server, tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "llmload", "run", "--target", server.url]
        cmd += ["--workers", str(workers), "--users", str(users), "--spawn-rate", str(users)]
        cmd += ["--pacing", "0s", "--modes", "stream", "--duration", duration]
        cmd += ["--max-tokens", "16", "--ignore-eos", "--no-report", "--out", str(out)]
        before = _server_requests(server.url)
        t0 = time.monotonic()
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        master = psutil.Process(proc.pid)
        cpu = 0.0
        while proc.poll() is None:
            try:
                t = master.cpu_times()
                cpu = t.user + t.system
            except psutil.NoSuchProcess:
                break
            time.sleep(0.2)
        _, err = proc.communicate(timeout=60)
        wall = time.monotonic() - t0
        served = _server_requests(server.url) - before
        lines = (out / "requests.jsonl").read_text().splitlines() if out.exists() else []
        records = [json.loads(x) for x in lines if x.strip()]
        info = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    return {
        "users": users,
        "workers": workers,
        "rc": proc.returncode,
        "records": len(records),
        "served": served,
        "lost": sum(1 for r in records if r.get("status") == "lost"),
        "lost_workers": len(info.get("lost_workers") or []),
        "master_cpu_s": cpu,
        "us_per_record": cpu / len(records) * 1e6 if records else float("nan"),
        "wall": wall,
        "stderr": err[-300:] if proc.returncode else "",
    }


# -- the section ----------------------------------------------------------------------------


def _client_verdict(rows: list[dict[str, Any]]) -> list[str]:
    """The goal at 1,000 streams (the default path), and lean vs httpx per CPU-second."""

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
        on, off = at(n, "lean"), at(n, UNSTAMPED)
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
        lean, plain = at(n, "lean"), at(n, "httpx")
        if lean and plain and plain["per_cpu_s"]:
            ratios.append(f"{lean['per_cpu_s'] / plain['per_cpu_s']:.2f}× at {n:,}")
    if ratios:
        out += [
            "",
            "Events per client CPU-second, lean ÷ httpx (same streams, measured back to back): "
            + ", ".join(ratios)
            + ".",
        ]
    return out


def render(res: dict[str, Any], args: argparse.Namespace, load: str) -> str:
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
        "`lean`: `loadtests.transport.http1`, llmload's default, its reads timed by the kernel's "
        "receive stamps; `lean, reads unstamped`: the same with `LLMLOAD_RECV_STAMPS=0`, "
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
    """How many worker cores 10,000 streams at ITL 50 ms take, from section 2's lean rows."""
    lean = [r for r in client_rows if r.get("client") == "lean" and r.get("per_cpu_s")]
    if not lean:
        return ""
    top = max(lean, key=lambda r: r["streams"])
    events = 10_000 * 1000 / CLIENT_ITL_MS
    return (
        f"The streams themselves, 10,000 at ITL {CLIENT_ITL_MS} ms ({events:,.0f} events/s), "
        f"take {events / top['per_cpu_s']:.1f} worker cores at the lean client's "
        f"{top['per_cpu_s']:,.0f} events per CPU-second (section 2, {top['streams']:,} "
        "streams, the bench child: `llmload run`'s own path costs more per request, see the "
        "row under section 2; on a machine 4× slower per core, 4× as many)."
    )


def main(argv: list[str] | None = None) -> int:
    """Run every part, print the section, write it into BENCHMARKS.md."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--burst-child"]:
        print(json.dumps(_burst_child(argv[1], argv[2])))
        return 0
    p = argparse.ArgumentParser(prog="python -m bench scale", description=__doc__)
    p.add_argument("--server-streams", default="200,1000")
    p.add_argument("--client-streams", default="20,200,1000")
    p.add_argument("--window", type=float, default=5.0, help="seconds per server row")
    p.add_argument("--run-users", type=int, default=1000, help="llmload run's path (0: skip)")
    p.add_argument("--run-duration", default="30s")
    p.add_argument("--dist-users", type=int, default=400)
    p.add_argument("--dist-workers", type=int, default=2)
    p.add_argument("--dist-duration", default="10s")
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    load, nan = _load(), float("nan")
    res: dict[str, Any] = {"server": [], "client": [], "burst": []}
    for n in (int(x) for x in args.server_streams.split(",")):
        for workers in (1, 2) if n >= 1000 else (1,):
            res["server"].append(server_row(n, workers, args.window))
            print(json.dumps(res["server"][-1]), flush=True)
    for n in (int(x) for x in args.client_streams.split(",")):
        for client in CLIENT_PATHS:  # interleaved: both paths at one load, one moment
            res["client"].append(client_row(n, client))
    if args.run_users:
        res["run"] = run_path(args.run_users, args.run_duration)
        print(json.dumps(res["run"]), flush=True)
    res["burst"] = burst_rows()
    if args.dist_users:
        # the master's cost per record is the slope between a small and a large run of the
        # same length: start-up (spawning workers, imports) cancels out
        small = distributed(args.dist_workers, args.dist_workers, args.dist_duration)
        print(json.dumps(small), flush=True)
        big = distributed(args.dist_users, args.dist_workers, args.dist_duration)
        print(json.dumps(big), flush=True)
        extra = big["records"] - small["records"]
        big["us_per_record"] = (
            (big["master_cpu_s"] - small["master_cpu_s"]) / extra * 1e6 if extra > 0 else nan
        )
        big["small"] = small
        res["distributed"] = big
    md = render(res, args, load)
    print(md)
    if not args.no_write:
        write_section("scale", md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
