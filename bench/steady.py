"""``python -m bench steady``: does ``--warmup auto`` find where a cold run's TTFT settles?

A run that starts cold: the bundled server with the embedded model (``--engine
transformers``, admitting ``--slots`` requests at a time) is started and, as soon as it
answers, ``llmload run --warmup auto`` begins with no warm-up phase and more users than
slots arriving over ``--spawn`` seconds, so the engine goes from idle to a steady queue
while the run measures.  Two answers to "where did TTFT settle":

* MSER-5's cut (``summary.json`` → ``phases.stream.steady.start_s``);
* a plain reading of the per-second TTFT series, independent of MSER: the first second
  from which every 5-second rolling median (a single slow second does not move it)
  stays past the ``--band`` edge the transient came from, relative to the median of
  the series' second half (``settles_at``).

Writes BENCHMARKS.md section ``steady`` with the series, both points and the calibration.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import calibration
from bench.mdsection import ROOT, load_note, machine, write_section
from bench.procs import start_server_process
from llmload.reports.table.loader import load_run
from llmload.reports.table.steady import per_second_ttft

WINDOW = 5


def settles_at(series: list[tuple[int, float]], band: float) -> int:
    """The first second from which every ``WINDOW``-second rolling median stays on the steady
    side of the band edge the transient came from: at least ``(1 - band)`` times the median of
    the series' second half when the series starts below it (a queue filling), at most
    ``(1 + band)`` times it when it starts above (a cold cache).  Later swings *beyond* the
    band on the far side are the steady state's own noise, not the transient."""
    values = [v for _, v in series]
    target = statistics.median(values[len(values) // 2 :])
    mids = [statistics.median(values[i : i + WINDOW]) for i in range(len(values) - WINDOW + 1)]
    if not mids:
        return series[0][0] if series else 0
    rising = mids[0] < target
    inside = [m >= (1 - band) * target if rising else m <= (1 + band) * target for m in mids]
    first = len(inside)
    for i in range(len(inside) - 1, -1, -1):
        if not inside[i]:
            break
        first = i
    return series[min(first, len(series) - 1)][0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench steady", description=__doc__)
    p.add_argument("--users", type=int, default=32, help="back-to-back users (32)")
    p.add_argument("--slots", type=int, default=8, help="requests the server admits at once (8)")
    p.add_argument("--spawn", type=float, default=16.0, help="seconds the users arrive over (16)")
    p.add_argument("--duration", default="60s", help="the measured phase (60s)")
    p.add_argument("--max-tokens", type=int, default=64, help="max_tokens per request (64)")
    p.add_argument("--band", type=float, default=0.25, help="settled: within this share (25%%)")
    p.add_argument("--no-write", action="store_true", help="print, do not touch BENCHMARKS.md")
    args = p.parse_args(argv)
    load1 = os.getloadavg()[0]
    cal = calibration.current()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-steady-") as tmp:
        out = Path(tmp) / "cold"
        cmd = [
            sys.executable, "-m", "llmload", "run", "--users", str(args.users),
            "--spawn-rate", f"{args.users / args.spawn:g}", "--pacing", "0s",
            "--duration", args.duration, "--warmup", "auto", "--modes", "stream",
            "--scenario", "short_qa", "--max-tokens", str(args.max_tokens),
            "--status-interval", "60", "--out", str(out),
        ]  # fmt: skip
        serve = ("--engine", "transformers", "--max-concurrency", str(args.slots))
        with start_server_process(*serve, ready_timeout=600) as server:
            started = time.monotonic() - t0
            proc = subprocess.run(
                [*cmd, "--target", server.url], cwd=ROOT, capture_output=True, text=True
            )
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
            return 1
        summary = json.loads((out / "summary.json").read_text())
        steady = summary["phases"]["stream"]["steady"]
        run = load_run(out)
        phase = next(ph for ph in run.meta["phases"] if ph["name"] == "stream")
        series = per_second_ttft(run.records, float(phase["started_at"]))
        settled = settles_at(series, args.band)
        ttft = summary["phases"]["stream"]["ttft_ms"]
    shown = ", ".join(f"{v:.0f}" for _, v in series)
    text = f"""## Steady state of a cold run: `--warmup auto` (`steady`)

`python -m bench steady` — {machine()}. {load_note(load1)}.

The bundled server with the embedded model (`llmload serve {" ".join(serve)}`,
ready after {started:.0f} s: model load and its own warm-up), then at once `llmload
{" ".join(cmd[3:-2])}`: no warm-up phase, {args.users} users for {args.slots} slots arriving over
{args.spawn:g} s, so the engine goes from idle to a steady queue while the run measures.
Per-second mean TTFT (ms, by start second) of the stream phase: {shown}.

- **MSER-5 cut at +{steady["start_s"]:g} s** ({steady["dropped_seconds"]} of {steady["seconds"]}
  seconds; {steady["records_left_out"]} requests left out of the statistics).
- **The series settles at +{settled} s**, read without MSER: the first second from which
  every {WINDOW}-second rolling median stays within {args.band:.0%} of the median of the
  series' second half on the side the transient came from (later swings the other way
  are the steady state's own noise).
- Difference: **{abs(steady["start_s"] - settled):g} s** (MSER-5 cuts in batches of five
  seconds). TTFT of the steady part: p50 {ttft["p50"]:.0f} ms, p95 {ttft["p95"]:.0f} ms
  over {ttft["n"]} requests.

{cal.line()}.
"""
    print(text)
    if not args.no_write:
        write_section("steady", text)
    return 0
