"""``python -m bench.server_ab``: the bundled server before and after a change, side by side.

Runs the synthetic server of a git ref (``--baseline``, extracted with ``git
archive`` into a temporary directory) and of the working tree, one after the
other, alternating which goes first each round, against ``bench.server_timing``'s
raw-socket client (TTFT 100 ms, ITL 50 ms, 40 tokens, as ``bench scale``).
Per row: events/s, the server's CPU per SSE event (the figure that stays put on a
shared machine), the share of the window it waited for a CPU, and its own TTFT
error (``x_llmload.ttft_s`` − configured).  With ``--profile FILE`` it also records
the working tree's server under py-spy at the largest stream count (raw collapsed
stacks in FILE) and prints where the samples were.  Prints markdown; writes no
BENCHMARKS.md section (this compares code, not machines).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import subprocess
import sys
import tarfile
import tempfile
from math import nan
from pathlib import Path
from typing import Any

import psutil

from bench.mdsection import load_average, machine
from llmload.loadtests.percentile import percentile_of
from llmload.target_server.launch import launch

ROOT = Path(__file__).resolve().parent.parent
TTFT_MS, ITL_MS, TOKENS = 100, 50, 40

#: (substring of a py-spy frame, where it goes), matched from the leaf up
PROFILE_RULES = (
    ("ChunkWriter.write", "socket write of a token event (one per event per stream)"),
    ("httptools_impl.py:544", "socket write of a token event (one per event per stream)"),
    ("httptools_impl.py:524", "socket write of the response head"),
    ("_Tally", "token stamps and ITL histogram"),
    ("HistogramChild", "token stamps and ITL histogram"),
    ("_Ticker", "the tick's per-stream step (encode, next piece, re-arm)"),
    ("RequestResponseCycle.send", "uvicorn's send (the rest)"),
    ("data_received", "HTTP parsing (httptools)"),
    ("HttpToolsProtocol.on_", "HTTP parsing (httptools)"),
    ("_generation (", "request handling (body, validation, admission)"),
    ("chunks.py", "JSON of the role, finish and usage events"),
    ("state.py", "request bookkeeping (metrics, log)"),
    ("Pacer", "the pacer (timers, slots)"),
    ("SyntheticEngine", "the engine's plan (deadlines, pieces)"),
    ("_stream.<locals>.emit", "a token through the request's task (emit, send)"),
    ("GenerationCall._generate", "a token through the request's task (emit, send)"),
    ("GenerationCall", "the generation call (headers, tail, watcher)"),
    ("starlette", "starlette/FastAPI routing and middleware"),
    ("fastapi", "starlette/FastAPI routing and middleware"),
    ("proxy_headers", "starlette/FastAPI routing and middleware"),
    ("run_asgi", "starlette/FastAPI routing and middleware"),
    ("Runner.run", "the event loop itself (epoll, timers, task steps)"),
)


def profile_shares(raw: str) -> list[tuple[str, float]]:
    """py-spy's raw output (``frame;frame;... count`` lines) -> (category, share) by share."""
    cats: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not count.isdigit() or count == "0":
            continue
        n = int(count)
        total += n
        frames = stack.split(";")[::-1]
        cat = next((c for f in frames for s, c in PROFILE_RULES if s in f), "other (~0.1 % each)")
        cats[cat] += n
    return [(c, n / total) for c, n in cats.most_common()] if total else []


def extract(ref: str, into: Path) -> Path:
    """``target_server/`` as of ``ref`` under ``into`` (for ``python -m llmload.target_server``)."""
    data = subprocess.run(
        ["git", "archive", "--format=tar", ref, "target_server"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(into, filter="data")
    return into


def row(tree: Path, streams: int, window: float, spy: str | None = None) -> dict[str, Any]:
    """One server from ``tree``, ``streams`` raw-socket streams for ``window`` s."""
    from bench.server_timing import run_level, runqueue_wait_s

    args = ["--log-level", "warning", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)]
    with launch(args, cwd=tree, ready_timeout=60) as server:
        proc = psutil.Process(server.proc.pid)
        recorder = None
        if spy:
            found = shutil.which("py-spy", path=str(Path(sys.executable).parent))
            cmd = [
                found or "py-spy",
                "record",
                "--pid",
                str(proc.pid),
                "--format",
                "raw",
                "--output",
                spy,
                "--duration",
                str(int(window + 2)),
                "--rate",
                "250",
                "--nonblocking",
            ]
            recorder = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cpu0 = sum(proc.cpu_times()[:2])
        wait0 = runqueue_wait_s(proc.pid)
        lv = asyncio.run(run_level(server.url, streams, TOKENS, window))
        cpu = sum(proc.cpu_times()[:2]) - cpu0
        wait = runqueue_wait_s(proc.pid) - wait0
        if recorder is not None:
            recorder.wait(window + 30)
    err = [v * 1000 - TTFT_MS for v in lv.ttft_server]
    return {
        "streams": streams,
        "requests": len(err),
        "errors": lv.errors,
        "events_per_s": lv.events / lv.wall,
        "us_per_event": cpu / lv.events * 1e6 if lv.events else float("nan"),
        "cpu": 100 * cpu / lv.wall,
        "wait": 100 * wait / lv.wall,
        "p50": percentile_of(err or [nan], 50),
        "p99": percentile_of(err or [nan], 99),
        "min": min(err, default=float("nan")),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.server_ab", description=__doc__)
    p.add_argument("--baseline", required=True, help="git ref of the 'before' server")
    p.add_argument("--streams", default="200,1000")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--window", type=float, default=5.0, help="seconds of traffic per row")
    p.add_argument("--profile", metavar="FILE", help="py-spy the working tree's server too")
    args = p.parse_args(argv)
    streams = [int(x) for x in args.streams.split(",")]
    load = load_average()
    rows: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        trees = {args.baseline: extract(args.baseline, Path(tmp)), "working tree": ROOT}
        for r in range(args.rounds):
            for n in streams:
                order = list(trees) if r % 2 == 0 else list(trees)[::-1]
                for name in order:
                    rows.append((name, row(trees[name], n, args.window)))
                    print(name, rows[-1][1], file=sys.stderr, flush=True)
    end = load_average()
    print(f"{machine()}\n\nload average {load} at start, {end} at the end\n")
    print(
        "| server | streams | requests | errors | events/s | CPU per event | server CPU "
        "| waiting for a CPU | TTFT err p50 / p99 / min |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, x in sorted(rows, key=lambda t: (t[1]["streams"], t[0])):
        err = f"{x['p50']:+.2f} / {x['p99']:+.2f} / {x['min']:+.2f} ms"
        print(
            f"| {name} | {x['streams']} | {x['requests']} | {x['errors']} "
            f"| {x['events_per_s']:,.0f} | {x['us_per_event']:.1f} µs | {x['cpu']:.0f} % "
            f"| {x['wait']:.0f} % | {err} |"
        )
    if args.profile:
        row(ROOT, max(streams), args.window, spy=args.profile)
        print(f"\npy-spy, working tree, {max(streams)} streams (raw stacks: {args.profile}):\n")
        print("| where the server's samples were | share |\n|---|---:|")
        for cat, share in profile_shares(Path(args.profile).read_text()):
            print(f"| {cat} | {100 * share:.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
