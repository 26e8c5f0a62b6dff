"""``python -m bench streams``: every stream shape timed by ``llmload run``, and first starts.

1. Plain chat, reasoning first (4 reasoning tokens) and tool-call answers from the
   bundled server (synthetic engine: first token at exactly 200 ms, then one every
   20 ms, 16 tokens), 20 closed-loop users (20 streams), ``llmload run`` as a user
   runs it: per shape, the records with a TTFT and a TTFO, client − server TTFT
   (what the harness adds; both stamp the request's arrival and the first token's
   send/receipt) and TTFO − TTFT (0 for plain and tool calls, 4 × 20 ms after
   reasoning).
2. ``make loadtest``'s closed loop (20 users, spawn rate 20, pacing 3 s, warm-up then
   sync and stream, synthetic engine): the largest share of a phase's request starts
   inside one 100 ms slice of the pacing interval, ``--first-start spread`` (the
   default) against ``together`` (lock-step: every user's request in the same slice).

Writes the ``streams`` section of BENCHMARKS.md (with the calibration line).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from bisect import bisect_left
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.mdsection import ROOT, load_average, load_note, machine, write_section
from bench.procs import start_server_process
from llmload.loadtests.percentile import percentile_of

SERVER = ("--ttft-ms", "200", "--itl-ms", "20", "--log-level", "warning")
REASONING = 4
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
SHAPES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # name: (server flags, run flags)
    "plain chat": ((), ()),
    "reasoning first": (("--reasoning-tokens", str(REASONING)), ()),
    "tool call": ((), ("--extra-body", json.dumps({"tools": TOOLS}))),
    # the same plain answers through the newer APIs: what their events cost the client
    "plain, Responses API": ((), ("--protocol", "openai-responses")),
    "plain, Messages API": ((), ("--protocol", "anthropic-messages")),
}
STREAMS = ("--users", "20", "--spawn-rate", "20", "--pacing", "1s", "--modes", "stream")
STREAMS += ("--max-tokens", "16", "--ignore-eos")
#: ``make loadtest``'s closed loop (Makefile: USERS, SPAWN_RATE, PACING, MODES), shorter
LOADTEST = ("--users", "20", "--spawn-rate", "20", "--pacing", "3s", "--modes", "sync,stream")
SLICE_S = 0.1


def densest_slice(times: list[float], period: float | None, width: float = SLICE_S) -> float:
    """The largest share of ``times`` inside one window of ``width`` seconds; with a
    ``period``, of the times folded into one interval (a window may wrap around its end)."""
    if period:
        t0 = min(times)
        points = sorted((t - t0) % period for t in times)
        points += [p + period for p in points]  # the windows that wrap around
    else:
        points = sorted(times)
    n = len(times)
    return max(bisect_left(points, points[i] + width) - i for i in range(n)) / n


def starts_by_phase(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each phase's request start times (``started_at``)."""
    out: dict[str, list[float]] = defaultdict(list)
    for r in records:
        out[r["phase"]].append(r["started_at"])
    return out


def run(url: str, out: Path, *args: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``llmload run`` (no report) to completion: its records and run.json."""
    cmd = [sys.executable, "-m", "llmload.loadtests", "run", "--target", url, "--out", str(out)]
    cmd += ["--no-report", "--status-interval", "60", *args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    lines = (out / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    info = json.loads((out / "run.json").read_text(encoding="utf-8"))
    return [json.loads(line) for line in lines], info


def lag_ms(info: dict[str, Any], phase: str) -> float:
    """The load generator's worst event-loop lag in ``phase`` (its own health block)."""
    for ph in info.get("phases") or []:
        if ph.get("name") == phase and ph.get("health"):
            procs = ph["health"]["processes"].values()
            return max((p.get("lag_max_ms", 0.0) for p in procs), default=0.0)
    return float("nan")


def shape_row(name: str, recs: list[dict[str, Any]], info: dict[str, Any]) -> str:
    """One table row: counts, client − server TTFT, TTFO − TTFT, tool calls, loop lag."""
    ok = [r for r in recs if r["status"] == "ok"]
    gaps = [(r["ttft_s"] - r["server_ttft_s"]) * 1000 for r in ok if r["ttft_s"] is not None]
    after = [
        (r["ttfo_s"] - r["ttft_s"]) * 1000 for r in ok if None not in (r["ttft_s"], r["ttfo_s"])
    ]
    ttft = sum(r["ttft_s"] is not None for r in recs)
    ttfo = sum(r["ttfo_s"] is not None for r in recs)
    calls = sum(r["tool_calls"] > 0 for r in recs)
    p = lambda xs, q: percentile_of(xs or [float("nan")], q)  # noqa: E731 - a one-line helper local to this function
    return (
        f"| {name} | {len(recs)} | {len(ok)} | {ttft} / {ttfo} | {calls} | "
        f"{p(gaps, 50):.2f} / {p(gaps, 95):.2f} / {max(gaps, default=float('nan')):.2f} | "
        f"{p(after, 50):.1f} / {p(after, 95):.1f} | {lag_ms(info, 'stream'):.1f} |"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench streams", description=__doc__)
    p.add_argument("--duration", default="10s", help="each stream-shape run (10s)")
    p.add_argument("--no-write", action="store_true", help="print, do not touch BENCHMARKS.md")
    args = p.parse_args(argv)
    load1 = os.getloadavg()[0]
    at_start = load_average()
    rows, spread_rows = [], []
    with tempfile.TemporaryDirectory(prefix="bench-streams-") as tmp:
        for name, (server_flags, run_flags) in SHAPES.items():
            server = start_server_process(*SERVER, *server_flags)
            try:
                out = Path(tmp) / name.replace(" ", "-")
                recs, info = run(server.url, out, *STREAMS, "--duration", args.duration, *run_flags)
            finally:
                server.stop()
            rows.append(shape_row(name, recs, info))
            print(rows[-1], flush=True)
        server = start_server_process(*SERVER)
        try:
            for mode in ("spread", "together"):
                out = Path(tmp) / f"first-start-{mode}"
                recs, _ = run(
                    server.url,
                    out,
                    *LOADTEST,
                    *("--duration", "12s", "--warmup", "6s", "--first-start", mode),
                )
                phases = starts_by_phase(recs)
                shares = ", ".join(
                    f"{ph} {densest_slice(t, 3.0):.0%} of {len(t)}" for ph, t in phases.items()
                )
                spread_rows.append(f"| `{mode}` | {shares} |")
                print(spread_rows[-1], flush=True)
        finally:
            server.stop()
    body = "\n".join(
        [
            "## Stream shapes timed by `llmload run`, and first starts (`streams`)",
            "",
            f"`python -m bench streams` — {machine()}. Load average at start: {at_start} — "
            f"{load_note(load1)}.",
            "",
            "Bundled server, synthetic engine: first token at exactly 200 ms, then one every "
            "20 ms, 16 tokens (`--ignore-eos`); `llmload run` with 20 closed-loop users "
            f"(20 streams, pacing 1 s, {args.duration}, streaming), server and client not "
            "pinned. Reasoning first: `--reasoning-tokens 4` (vLLM's `reasoning_content` "
            "deltas, then the answer); tool call: `--extra-body` with one tool, answered by "
            "a streamed call (name, then argument pieces); plain, Responses / Messages API: "
            "the plain answer through `--protocol openai-responses` / `anthropic-messages` "
            "(the server's named events). *TTFT / TTFO*: records with each. "
            "*Client − server TTFT*: the record's TTFT minus the server's own "
            "(`x_llmload.ttft_s`, arrival → first event handed to the socket), ms. "
            "*TTFO − TTFT*: expected 0, 80 (4 × 20), then 0 ms. *Loop lag*: the client's worst "
            "event-loop lag in the phase (its own health sample).",
            "",
            "| shape | requests | ok | with TTFT / TTFO | tool calls | client − server TTFT "
            "p50 / p95 / max (ms) | TTFO − TTFT p50 / p95 (ms) | loop lag max (ms) |",
            "|---|---:|---:|---|---:|---|---|---:|",
            *rows,
            "",
            "`make loadtest`'s closed loop against the same server (20 users, spawn rate 20, "
            "pacing 3 s, 6 s warm-up, then 12 s sync and 12 s stream): the largest share of a "
            "phase's request starts inside one 100 ms slice of the 3 s interval (a window "
            "anywhere on it, wrapping around). Lock-step is 100 %.",
            "",
            "| `--first-start` | densest 100 ms of the interval, per phase |",
            "|---|---|",
            *spread_rows,
        ]
    )
    if args.no_write:
        print(body)
    else:
        write_section("streams", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
