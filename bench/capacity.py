"""``python -m bench capacity``: the embedded model's capacity on this machine, searched and swept.

Starts the bundled server (embedded model, continuous batching), runs
``llmload capacity`` (open loop, p95 TTFT <= 600 ms and p95 TPOT <= 50 ms, the
issue's SLOs), then a fixed sweep (``--sweep``, guidellm's way) of the same
range — from the lowest to the highest load the search tried, the same
requests per step — and writes both answers, their time and their phase
counts to the ``capacity`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.mdsection import ROOT, load_note, machine, write_section
from llmload.bundled import start_server

SLO = "ttft_p95=600ms,tpot_p95=50ms"
WORKLOAD = ("--scenario", "short_qa", "--max-tokens", "64", "--ignore-eos", "--seed", "1")


def capacity(url: str, out: Path, *extra: str, timeout: float) -> tuple[dict[str, Any], float]:
    """One ``llmload capacity`` run: run.json's capacity block, and its wall time."""
    cmd = [
        sys.executable,
        "-m",
        "llmload",
        "capacity",
        "--target",
        url,
        "--slo",
        SLO,
        *WORKLOAD,
        "--out",
        str(out),
        *extra,
    ]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    info = json.loads((out / "run.json").read_text(encoding="utf-8"))
    return info["capacity"], wall


def row(name: str, cap: dict[str, Any], wall: float) -> str:
    ans = cap["answer"] or {}
    steps = cap["steps"]
    mark = {"pass": "", "fail": "✗", "unreliable": "?"}
    loads = ", ".join(f"{s['load']:g}{mark.get(s['search_verdict'], '?')}" for s in steps)
    lo, hi = ans.get("lo"), ans.get("hi")
    if lo is not None and hi is not None:
        bracket = f"{lo:g} … {hi:g}"
    else:
        bracket = f"≥ {lo:g}" if lo is not None else f"< {hi:g}" if hi is not None else "–"
    return (
        f"| {name} | {ans.get('text', '–')} | {bracket} | {len(steps)} | {wall:.0f} s | {loads} |"
    )


def width(cap: dict[str, Any]) -> str:
    """The final bracket's width as a share of its upper end."""
    ans = cap["answer"] or {}
    lo, hi = ans.get("lo"), ans.get("hi")
    return f"{(hi - lo) / hi:.0%}" if lo is not None and hi else "–"


def near(cap: dict[str, Any], within: float = 0.25) -> str:
    """Share of the steps' wall time spent within ``within`` of the answer."""
    est = (cap["answer"] or {}).get("estimate")
    total = sum(s.get("wall_s") or 0.0 for s in cap["steps"])
    if not est or not total:
        return "–"
    steps = cap["steps"]
    close = sum(s.get("wall_s") or 0.0 for s in steps if abs(s["load"] - est) <= within * est)
    return f"{close / total:.0%}"


def agreement(search: dict[str, Any], sweep: dict[str, Any], load0: float, load1: float) -> str:
    """A sentence when the two answers' brackets do not overlap (the target changed speed)."""
    a, b = search["answer"] or {}, sweep["answer"] or {}
    lo = max(x for x in (a.get("lo"), b.get("lo"), 0.0) if x is not None)
    his = [x for x in (a.get("hi"), b.get("hi")) if x is not None]
    if not his or lo < min(his):
        return ""
    return (
        f" **The two brackets do not overlap**: the target's speed changed between the runs "
        f"(a shared machine: 1-minute load average {load0:.1f} at the start, {load1:.1f} at "
        f"the end), so compare their times and phase counts, not their answers."
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench capacity", description=__doc__)
    p.add_argument("--engine", default="transformers", help="bundled server engine")
    p.add_argument("--server-arg", action="append", default=[], help="bundled-server argument")
    p.add_argument("--budget", default="6m", help="the search's budget (6m)")
    p.add_argument("--sweep", type=int, default=8, help="loads in the fixed sweep (8)")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-capacity")
    p.add_argument("--no-write", action="store_true", help="print, do not touch BENCHMARKS.md")
    args = p.parse_args(argv)
    load1 = os.getloadavg()[0]
    t_all = time.monotonic()
    server = start_server(args.engine, args.server_arg)
    try:
        common = ("--rate", "2", "--warmup", "15s", "--max-step", "60s")
        search, t_search = capacity(
            server.url, args.out / "search", *common, "--budget", args.budget, timeout=1800
        )
        tried = [s["load"] for s in search["steps"]]
        if not tried:
            raise RuntimeError(f"the search ran no step: {search['answer']}")
        lo, hi = min(tried), max(tried)
        sweep, t_sweep = capacity(
            server.url,
            args.out / "sweep",
            *common,
            "--budget",
            "60m",
            "--sweep",
            str(args.sweep),
            "--min",
            f"{lo:g}",
            "--max",
            f"{hi:g}",
            timeout=3600,
        )
    finally:
        server.stop()
    n = search["requests_per_step"]
    load_end = os.getloadavg()[0]
    all_steps = search["steps"] + sweep["steps"]
    starved = sum(bool(s.get("starved")) for s in all_steps)
    body = "\n".join(
        [
            f"`python -m bench capacity` — {machine()}; {load_note(load1)}; "
            f"{time.monotonic() - t_all:.0f} s in all.",
            "",
            f"Target: the bundled server, engine `{args.engine}`"
            + (" (embedded model, continuous batching)" if args.engine == "transformers" else "")
            + (f", server args `{' '.join(args.server_arg)}`" if args.server_arg else "")
            + f". SLOs `{SLO}`, open loop (Poisson arrivals, latency from the intended "
            f"send time), streaming, `short_qa` prompts with 64 output tokens; {n} requests per "
            f"step (2 × the 59 that can show a p95 at 95 % confidence; 59 while no load had "
            f"failed yet), 60 s at most; each "
            f"step judged by an exact binomial test at 95 %.",
            "",
            "| method | answer | bracket (req/s) | phases | time | loads tried (✗ not sustained, "
            "? load generator starved) |",
            "|---|---|---|---|---|---|",
            row(f"`llmload capacity` (budget {args.budget})", search, t_search),
            row(f"fixed sweep, {args.sweep} loads of the same range", sweep, t_sweep),
            "",
            f"Side by side: the search took {t_search / t_sweep:.2f}× the sweep's time; its "
            f"final bracket is {width(search)} of its upper end wide, the sweep's "
            f"{width(sweep)} (its spacing: {(hi - lo) / max(1, args.sweep - 1):.3g} req/s); "
            f"{near(search)} of the search's step time went to loads within 25 % of its "
            f"answer, {near(sweep)} of the sweep's. The sweep was given the range the search "
            f"found ({lo:g} … {hi:g} req/s); on its own a sweep has to guess one."
            + agreement(search, sweep, load1, load_end),
            "",
            f"{starved} of {len(all_steps)} steps ran with the load generator starved (CPU or "
            f"event-loop lag above the line: on this machine it shares the cores with the "
            f"model server). A pass then still counts (a starved client only adds delay); a "
            f"failure by no more than the client's worst loop lag is run again, and a load "
            f"starved twice is a ceiling the search narrows below.",
        ]
    )
    print(body)
    if not args.no_write:
        write_section("capacity", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
