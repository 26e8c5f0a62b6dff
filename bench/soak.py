"""``make soak`` / ``python -m bench.soak``: a long run, watching both sides for leaks.

The bundled server (default: the embedded model, ``--engine transformers``,
continuous batching) runs in this process on a uvicorn thread, so its asyncio
tasks can be counted; its decode loop runs in the engine process
(``--engine-process on``); ``python -m llmload.loadtests run`` (20 users, streaming) runs
as a subprocess.  Every ``--every`` seconds each process is sampled: RSS,
threads, open file descriptors (and the server's asyncio tasks and busy
slots).  The first sample after ``--settle`` is "start", the last one before
the load stops is "end"; a least-squares slope of RSS over that span says
whether memory keeps growing.  The result rewrites the ``soak`` section of
RELIABILITY.md, labelled with the duration that really ran.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.mdsection import ROOT, machine, write_section
from bench.reliability import RELIABILITY, ensure_file
from llmload.loadtests.durations import parse_duration
from llmload.target_server.serving import ThreadedServer, start_server_thread
from llmload.target_server.settings import parse_settings


@dataclass
class Sample:
    """One look at both processes, ``t`` seconds after the load started."""

    t: float
    server: dict[str, float]
    loadgen: dict[str, float] | None
    #: the engine process (``--engine-process on``): the model, KV cache and decode loop
    engine: dict[str, float] | None = None


def start_server(engine: str, extra: list[str]) -> ThreadedServer:
    """The bundled server from its own flags, on a thread of this process (to count its tasks)."""
    settings = parse_settings(["--engine", engine, "--log-level", "warning", *extra])
    return start_server_thread(settings, ready_timeout=900.0)


def process_stats(proc: psutil.Process) -> dict[str, float]:
    """RSS (MiB), threads and open fds of one process."""
    with proc.oneshot():
        return {
            "rss_mib": proc.memory_info().rss / 2**20,
            "threads": float(proc.num_threads()),
            "fds": float(proc.num_fds()),
        }


def halves(values: list[float]) -> tuple[float, float]:
    """Medians of the first and the second half of a series (robust to allocator swings)."""
    mid = len(values) // 2
    return statistics.median(values[: max(1, mid)]), statistics.median(values[mid:])


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(seconds, value)`` points, per minute (0 with < 2 points)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return 60.0 * sum((t - mx) * (v - my) for t, v in points) / var


def soak(args: argparse.Namespace) -> dict[str, Any]:
    """Run it; everything the section needs."""
    me = psutil.Process()
    server = start_server(args.engine, args.server_arg or [])
    state = server.state
    before = {**process_stats(me), "tasks": float(server.tasks())}
    out = Path(args.run_dir)
    cmd = [
        sys.executable,
        "-m",
        "llmload.loadtests",
        "run",
        "--target",
        server.url,
        "--out",
        str(out),
        "--users",
        str(args.users),
        "--spawn-rate",
        str(args.users),
        "--pacing",
        args.pacing,
        "--duration",
        f"{args.duration_s:g}s",
        "--modes",
        "stream",
        "--max-tokens",
        str(args.max_tokens),
        "--no-report",
    ]
    samples: list[Sample] = []
    gen = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    gen_ps = psutil.Process(gen.pid)
    engine_pid = getattr(server.engine, "pid", None)
    engine_ps = psutil.Process(engine_pid) if engine_pid else None
    try:
        while gen.poll() is None and state.admission.running == 0:  # the CLI is starting up
            time.sleep(0.05)
        began = time.monotonic()  # the first request is in: the load has begun
        while gen.poll() is None:
            time.sleep(args.every)
            srv = {
                **process_stats(me),
                "tasks": float(server.tasks()),
                "running": float(state.admission.running),
            }
            try:
                lg: dict[str, float] | None = process_stats(gen_ps)
            except psutil.Error:
                lg = None
            eng: dict[str, float] | None = None
            if engine_ps is not None:
                with contextlib.suppress(psutil.Error):
                    eng = process_stats(engine_ps)
            samples.append(Sample(time.monotonic() - began, srv, lg, eng))
        stdout, stderr = gen.communicate(timeout=60)
        time.sleep(2.0)  # let the last connections close
        after = {
            **process_stats(me),
            "tasks": float(server.tasks()),
            "running": float(state.admission.running),
        }
        counted: Counter[str] = Counter()
        for m in state.metrics.registry.collect():
            for s in m.samples:
                if s.name == "llmserve_requests_total":
                    counted[s.labels["status"]] += int(s.value)
    finally:
        if gen.poll() is None:
            gen.kill()
        server.stop()
    wall = time.monotonic() - began
    loaded = [s for s in samples if args.settle <= s.t <= args.duration_s - args.every / 2]
    records = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x]
    return {
        "engine": " ".join(["--engine", args.engine, *(args.server_arg or [])]),
        "users": args.users,
        "pacing": args.pacing,
        "duration_s": args.duration_s,
        "wall_s": wall,
        "rc": gen.returncode,
        "before": before,
        "after": after,
        "samples": samples,
        "loaded": loaded,
        "records": len(records),
        "classes": Counter(r["status"] for r in records),
        "counted": counted,
        "stderr_tail": stderr[-400:],
        "stdout_tail": stdout[-400:],
        "command": args.command,
    }


def _fmt(value: float, key: str) -> str:
    return f"{value:.1f}" if key == "rss_mib" else f"{value:.0f}"


def _human(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s" if s else f"{m} min"


def render(res: dict[str, Any], where: str) -> str:
    """The soak section: start/end/growth per process and resource, requests, records lost."""
    loaded = res["loaded"]
    start, end = loaded[0], loaded[-1]
    lines = [
        f"**{_human(res['duration_s'])} at {res['users']} users** (streaming, pacing "
        f"{res['pacing']}) against the bundled server with `{res['engine']}`, "
        f"produced by `{res['command']}` on {where}.",
        "",
        "Start = first sample after the warm-up, end = last sample under load "
        f"({start.t:.0f} s → {end.t:.0f} s after the load began; {len(loaded)} samples).",
        "",
        "| process | resource | idle before | under load: start | end | growth | median 1st → "
        "2nd half | trend | idle after |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    b, a = res["before"], res["after"]
    names = {"server": "server", "engine": "engine process", "loadgen": "load generator"}
    for side in ("server", "engine", "loadgen"):
        first, last = getattr(start, side), getattr(end, side)
        if first is None or last is None:
            continue
        for key, label in (
            ("rss_mib", "RSS MiB"),
            ("threads", "threads"),
            ("fds", "open fds"),
            ("tasks", "asyncio tasks"),
        ):
            if key not in first:
                continue
            pts = [(s.t, getattr(s, side)[key]) for s in loaded if getattr(s, side)]
            idle = (_fmt(b[key], key), _fmt(a[key], key)) if side == "server" else ("—", "—")
            h1, h2 = halves([v for _, v in pts])
            lines.append(
                f"| {names[side]} | {label} | {idle[0]} | "
                f"{_fmt(first[key], key)} | {_fmt(last[key], key)} | "
                f"{last[key] - first[key]:+.1f} | {_fmt(h1, key)} → {_fmt(h2, key)} | "
                f"{slope_per_min(pts):+.2f} / min | {idle[1]} |"
            )
    lost = abs(sum(res["counted"].values()) - res["records"])
    classes = ", ".join(f"{n} {k}" for k, n in res["classes"].most_common())
    lines += [
        "",
        "Idle before = the server loaded, before any request; idle after = 2 s after the load "
        f"generator exited ({a['running']:.0f} slots still busy).  The allocator makes single "
        "RSS samples swing; the medians of the first and second half of the samples under "
        "load, and the least-squares trend over all of them, are what show a leak.  asyncio "
        "tasks under load follow the requests in flight.",
        f"Requests: {res['records']} records ({classes}); the server counted "
        f"{sum(res['counted'].values())}; **records lost: {lost}**; load generator exit code "
        f"{res['rc']}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--duration", default="10m", help="how long the load runs (10m)")
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--pacing", default="3s", help="start-to-start per user (3s)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--engine", default="transformers")
    parser.add_argument("--server-arg", action="append", help="extra server flag (repeatable)")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--settle", type=float, default=None, help="warm-up seconds (10%%)")
    parser.add_argument("--run-dir", default=None, help="run directory (runs/<UTC>-soak)")
    parser.add_argument("--out", type=Path, default=RELIABILITY)
    args = parser.parse_args(argv)
    args.duration_s = parse_duration(args.duration)
    args.server_arg = list(args.server_arg or [])
    if args.engine == "transformers" and "--batching" not in args.server_arg:
        args.server_arg += ["--batching", "continuous"]
    if args.settle is None:
        args.settle = max(args.every, 0.1 * args.duration_s)
    if args.run_dir is None:
        args.run_dir = str(ROOT / "runs" / time.strftime("%Y%m%dT%H%M%SZ-soak", time.gmtime()))
    args.command = "python -m bench.soak " + " ".join(argv if argv is not None else sys.argv[1:])
    res = soak(args)
    if len(res["loaded"]) < 2:
        print("soak: too few samples under load; run longer", file=sys.stderr)
        return 1
    text = render(res, machine())
    print(text)
    ensure_file(args.out)
    write_section("soak", text, path=args.out)
    print(f"wrote {args.out}")
    return 0 if res["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
