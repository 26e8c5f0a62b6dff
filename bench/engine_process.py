"""``python -m bench engine-process``: the decode loop in its own process vs on a server thread.

Two bundled servers (embedded model, ``--batching continuous``) up together,
``--engine-process on`` (the default) and ``off``; measured on each, rounds
interleaved (on, off, on, off, ...) so both see the same machine:

* startup: launch until ``/health`` answers 200 (load + warm-up), each started alone;
* 20 streams started together, 256 tokens each (``bench.model.users``): aggregate
  tokens/s, the decode turn it implies (20 rows / (tokens/s / 20)) and the CPU the
  server and its engine process spent per token, with the
  server's event loop busy writing those 20 streams — the case where the loop and
  a decode *thread* share one GIL.

Prints a table with the machine's calibration and load average; writes it to
docs/engines.md (section ``engine-process``) unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import psutil

from bench.calibration import current as calibration
from bench.mdsection import ROOT, write_section
from bench.model import users
from llmload.target_server.launch import ServerProcess, launch

ENGINES_DOC = ROOT / "docs" / "engines.md"
MODES = ("on", "off")


def cpu_s(server: ServerProcess) -> float:
    """CPU seconds used so far by the server process and its engine process."""
    proc = psutil.Process(server.proc.pid)
    times = [p.cpu_times() for p in (proc, *proc.children(recursive=True))]
    return sum(t.user + t.system for t in times)


def serve(mode: str) -> tuple[ServerProcess, float]:
    """One bundled server with ``--engine-process mode``; (server, seconds to healthy)."""
    args = (
        "--log-level",
        "warning",
        "--engine",
        "transformers",
        "--batching",
        "continuous",
        "--engine-process",
        mode,
    )
    t0 = time.monotonic()
    server = launch(args, ready_timeout=600)
    return server, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench engine-process", description=__doc__)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--no-write", action="store_true", help="print, do not touch the docs")
    args, _ = parser.parse_known_args(argv)
    cal = calibration()
    load0 = os.getloadavg()[0]
    servers: dict[str, ServerProcess] = {}
    startup: dict[str, float] = {}
    agg: dict[str, list[float]] = {m: [] for m in MODES}
    cpu: dict[str, list[float]] = {m: [] for m in MODES}  # server + engine CPU ms per token
    try:
        for mode in MODES:
            servers[mode], startup[mode] = serve(mode)
        for _ in range(args.repeats):
            for mode in MODES:
                c0 = cpu_s(servers[mode])
                many, wall = asyncio.run(users(servers[mode].url, args.users, 1, args.tokens))
                tokens = sum(r.tokens for r in many)
                agg[mode].append(tokens / wall)
                cpu[mode].append(1000 * (cpu_s(servers[mode]) - c0) / tokens)
                print(
                    f"{mode}: {agg[mode][-1]:.0f} tok/s, {cpu[mode][-1]:.2f} CPU ms/token",
                    flush=True,
                )
    finally:
        for server in servers.values():
            server.stop(timeout=30)
    load1 = os.getloadavg()[0]
    rows = []
    for mode in MODES:
        med = statistics.median(agg[mode])
        step_ms = 1000 * args.users / med
        runs = ", ".join(f"{x:,.0f}" for x in agg[mode])
        cpu_ms = statistics.median(cpu[mode])
        rows.append(
            f"| {mode} | {startup[mode]:.1f} s | {med:,.0f} ({runs}) | {step_ms:.1f} ms "
            f"| {cpu_ms:.2f} ms |"
        )
    ratio = statistics.median(agg["on"]) / statistics.median(agg["off"])
    body = "\n".join(
        [
            f"Written by `python -m bench engine-process`; {cal.line()}; "
            f"load average {load0:.1f} -> {load1:.1f} (1 min) during the run.",
            "",
            f"| `--engine-process` | startup to healthy | {args.users} streams x {args.tokens} "
            "tokens: aggregate tokens/s, median (rounds) | decode turn implied "
            "| server + engine CPU per token |",
            "|---|---|---|---|---|",
            *rows,
            "",
            f"In its own process the loop ran **{ratio:.2f}x** the tokens/s of the loop on a "
            "server thread, both servers up together, rounds interleaved.",
        ]
    )
    print(body)
    if not args.no_write:
        write_section("engine-process", body, path=ENGINES_DOC)
    return 0
