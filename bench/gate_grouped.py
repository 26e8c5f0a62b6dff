"""``python -m bench gate-grouped``: the ITL check on a real model, gaps pooled vs grouped.

A request's gaps are not independent where requests are batched: a request that shares
its steps with a long prefill has several slow gaps together.  The gate counts a run's
gaps by their design effect (``reports.gate.bootstrap``); before, it resampled them as
independent.  This bench measures what that means on the bundled real model (the
embedded transformers engine with continuous batching, ``make loadtest``'s default
target): ``--runs`` short runs back to back against one server, each
``--users`` paced users streaming, and every pair of distinct runs gated as A/A (the
earlier run as the baseline) on ITL p95 and ITL p50, once with the gaps grouped and
once pooled.  Per run: the design effect at each percentile; per pair and way: whether
the two-sided 90 % interval of the change (the one-sided 95 % bounds) leaves out "no
change" — for a calibrated interval about 10 % of pairs, more where the interval is too
narrow or the machine drifts between runs (which neither bootstrap can see) — its
half-width, and the verdict at the default +10 % allowance.  Pairs share runs, so they
are not independent trials.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench import calibration
from bench.mdsection import load_note, machine, write_section
from llmload.bundled import ENGINE_ARGS, READY_TIMEOUT_S
from llmload.reports.gate.baseline import make_baseline
from llmload.reports.gate.sides import RecordsSide
from llmload.reports.gate.verdict import FAIL, GateConfig, evaluate
from llmload.reports.table.loader import Run, load_run
from llmload.target_server.launch import launch

PERCENTILES = (95.0, 50.0)
HEADER = (
    '| check, gaps | A/A pairs whose 90 % interval leaves out "no change" | median half-width '
    "| A/A change, range | fails at +10 % |\n|---|---|---|---|---|"
)


def load_args(users: int, duration: str) -> list[str]:
    """Each run's load: paced users streaming, a warm-up left out of the gate."""
    return [
        *("--users", str(users), "--spawn-rate", str(users), "--pacing", "1s"),
        *("--duration", duration, "--warmup", "5s", "--modes", "stream"),
    ]


def collect(url: str, runs: int, users: int, duration: str, tmp: Path) -> list[Run]:
    """``runs`` runs back to back against one server."""
    out: list[Run] = []
    for i in range(runs):
        path = tmp / f"run-{i}"
        cmd = [sys.executable, "-m", "llmload.loadtests", "run", "--target", url]
        cmd += [*load_args(users, duration), "--out", str(path), "--no-report"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=600)
        out.append(load_run(path))
        print(f"  run {i}: {len(out[-1].measured)} requests", flush=True)
    return out


@dataclass
class Way:
    """One way of counting the gaps at one percentile, over every A/A pair."""

    label: str
    pairs: int = 0
    excludes: int = 0
    fails: int = 0
    half_widths: list[float] = field(default_factory=list)
    changes: list[float] = field(default_factory=list)


def score(runs: list[Run], q: float, grouped: bool) -> Way:
    """Gate every A/A pair on ITL p``q``; count intervals without "no change" and failures."""
    way = Way(f"ITL p{q:g}, gaps {'grouped' if grouped else 'pooled'}")
    baselines = [make_baseline(r) for r in runs]
    cfg = GateConfig(metric=f"itl:p{q:g}", grouped=grouped)
    for i, j in itertools.combinations(range(len(runs)), 2):
        check = evaluate(runs[j], baselines[i], cfg).checks[0]
        n = check.numbers
        if "ratio_low" not in n:
            continue
        way.pairs += 1
        way.excludes += n["ratio_low"] > 1.0 or n["ratio_high"] < 1.0
        way.fails += check.verdict == FAIL
        way.half_widths.append((n["ci_high_pct"] - n["ci_low_pct"]) / 2)
        way.changes.append(n["change_pct"])
    return way


def effects(runs: list[Run]) -> dict[float, list[float]]:
    """Each run's design effect at each percentile (from its own records)."""
    got: dict[float, list[float]] = {q: [] for q in PERCENTILES}
    for run in runs:
        side = RecordsSide(run).latency("itl", "stream", "all")
        if side is None:
            continue
        for q in PERCENTILES:
            got[q].append(side.design_effect(q) or 1.0)
    return got


def render(
    ways: list[Way], eff: dict[float, list[float]], runs: list[Run], load: str, note: str
) -> str:
    gaps = [len(r.measured.itl()) for r in runs]
    reqs = [len(r.measured) for r in runs]
    rows = [
        f"| {w.label} | {w.excludes}/{w.pairs} | {statistics.median(w.half_widths or [0.0]):.1f}% "
        f"| {min(w.changes or [0]):+.1f} … {max(w.changes or [0]):+.1f}% | {w.fails}/{w.pairs} |"
        for w in ways
    ]
    eff_text = "; ".join(f"p{q:g} {min(v):.1f}–{max(v):.1f}" for q, v in eff.items() if v)
    per_run = "; ".join(
        f"p{q:g} "
        + ", ".join(f"{float(np.percentile(r.measured.itl(), q)) * 1000:.1f}" for r in runs)
        + " ms"
        for q in PERCENTILES
    )
    return f"""## The ITL check on a real model: a request's gaps pooled vs grouped (`gate-grouped`)

`python -m bench gate-grouped` — {machine()}. {note}

Method: {len(runs)} runs back to back against one bundled real-model server (the embedded
transformers engine, continuous batching — `make loadtest`'s default target), each
`{load}` ({min(reqs)}–{max(reqs)} measured requests, {min(gaps):,}–{max(gaps):,} gaps
per run); every pair of distinct runs gated as A/A on ITL alone (`--metric itl:pQ`, the
earlier run as the baseline), once counting the gaps by their design effect (the gate
now) and once as independent (the gate before). Pairs share runs: not independent trials.

Design effect of the gaps (how many times wider a percentile's sampling variance is
than for as many independent gaps), per run: **{eff_text}**. Each run's own ITL, in the
order they ran: {per_run}.

{HEADER}
{chr(10).join(rows)}

A calibrated 90 % interval leaves out "no change" in about 10 % of A/A pairs; more means
the interval is narrower than the change moves between runs — from counting grouped gaps
as independent, or from the machine drifting between runs (which neither way sees:
interleave and repeat, `--repeat`, where it does).
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench gate-grouped", description=__doc__)
    p.add_argument("--runs", type=int, default=7, help="runs (7 -> 21 A/A pairs)")
    p.add_argument("--users", type=int, default=20, help="paced users per run (20)")
    p.add_argument("--duration", default="20s", help="measured seconds per run (20s)")
    p.add_argument("--no-write", action="store_true", help="print, do not touch BENCHMARKS.md")
    args = p.parse_args(argv)
    load1 = os.getloadavg()[0]
    calibration.current()  # before the runs load the machine
    t0 = time.monotonic()
    server_args = [
        "--engine",
        "transformers",
        *ENGINE_ARGS["transformers"],
        "--log-level",
        "warning",
    ]
    with (
        tempfile.TemporaryDirectory(prefix="bench-gate-grouped-") as tmp,
        launch(server_args, ready_timeout=READY_TIMEOUT_S) as server,
    ):
        runs = collect(server.url, args.runs, args.users, args.duration, Path(tmp))
        ways = [score(runs, q, grouped) for q in PERCENTILES for grouped in (True, False)]
        eff = effects(runs)
        note = (
            f"{load_note(load1)}; {os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} "
            f"cores; {time.monotonic() - t0:.0f} s in all."
        )
        text = render(ways, eff, runs, " ".join(load_args(args.users, args.duration)), note)
    print(text)
    if not args.no_write:
        write_section("gate-grouped", text)
    return 0
