"""``python -m bench gate``: the TTFT gate's false-alarm and detection rates on real short runs.

Every run is the exact ``make ci-gate`` load (``llmload.ci.LOAD_ARGS``: 8 users,
2 s warm-up, 10 s streaming) against a bundled synthetic server.  Three servers
run side by side — TTFT 200 ms (the baseline), 220 ms (+10 %) and 240 ms (+20 %)
— and the runs are interleaved (200, 220, 240, 200, ...) so that the machine's
changing load touches every level alike.  A/A pairs are every pair of distinct
200 ms runs (earlier one as the baseline); detection pairs are every (200 ms run,
regressed run).  Pairs share runs, so they are not independent trials.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from bench.mdsection import load_note, machine, write_section
from llmload.ci import LOAD_ARGS, SERVER_ARGS, run_load, synthetic_server
from llmload.reports.baseline import make_baseline
from llmload.reports.gate import FAIL, INCONCLUSIVE, GateConfig, evaluate
from llmload.reports.loader import Run, load_run

NAN = float("nan")
LEVELS = {"A/A (200 ms vs 200 ms)": 200.0, "+10% (220 ms)": 220.0, "+20% (240 ms)": 240.0}


def collect(base_runs: int, regressed_runs: int, tmp: Path) -> dict[float, list[Run]]:
    """Interleaved real runs per server TTFT level."""
    counts = {200.0: base_runs, 220.0: regressed_runs, 240.0: regressed_runs}
    runs: dict[float, list[Run]] = {ms: [] for ms in counts}
    with ExitStack() as stack:
        urls = {ms: stack.enter_context(synthetic_server(ms)) for ms in counts}
        for i in range(max(counts.values())):
            for ms, n in counts.items():
                if i < n:
                    out = run_load(tmp / f"{ms:g}-{i}", urls[ms], report=False)
                    runs[ms].append(load_run(out))
                    print(
                        f"  run {ms:g} ms #{i}: {len(runs[ms][-1].measured)} requests", flush=True
                    )
    return runs


@dataclass
class Row:
    """Verdict counts and observed changes for one regression level."""

    label: str
    pairs: int
    fail: int
    inconclusive: int
    median_change: float
    lo: float
    hi: float
    median_width: float


def score(runs: dict[float, list[Run]], cfg: GateConfig) -> list[Row]:
    """Gate every pair; count verdicts per level."""
    base = runs[200.0]
    baselines = [make_baseline(r) for r in base]
    rows = []
    for label, ms in LEVELS.items():
        if ms == 200.0:
            pairs = [
                (baselines[i], base[j]) for i, j in itertools.combinations(range(len(base)), 2)
            ]
        else:
            pairs = [(b, r) for b in baselines for r in runs[ms]]
        results = [evaluate(run, b, cfg).checks[0] for b, run in pairs]
        changes = [c.numbers["change_pct"] for c in results if "change_pct" in c.numbers] or [NAN]
        widths = [
            c.numbers["ci_high_pct"] - c.numbers["ci_low_pct"]
            for c in results
            if "ci_low_pct" in c.numbers
        ] or [NAN]
        rows.append(
            Row(
                f"{label}, max +{cfg.max_regression * 100:g}%",
                len(results),
                sum(c.verdict == FAIL for c in results),
                sum(c.verdict == INCONCLUSIVE for c in results),
                statistics.median(changes),
                min(changes),
                max(changes),
                statistics.median(widths),
            )
        )
    return rows


def render(
    rows: list[Row], runs: dict[float, list[Run]], cfg: GateConfig, elapsed: float, load: str
) -> str:
    """The BENCHMARKS.md section."""
    n = [len(r.measured) for rs in runs.values() for r in rs]
    counts = " + ".join(str(len(runs[ms])) for ms in (200.0, 220.0, 240.0))
    table = [
        "| level, threshold: pairs | gate fails (exit 1) | inconclusive (exit 2) | median Δ p95 | "
        "Δ range | median CI width |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        table.append(
            f"| {r.label}: {r.pairs} | {r.fail}/{r.pairs} ({r.fail / r.pairs:.0%}) | "
            f"{r.inconclusive}/{r.pairs} | {r.median_change:+.1f}% | "
            f"{r.lo:+.1f}% … {r.hi:+.1f}% | {r.median_width:.1f} pts |"
        )
    aa, ten, twenty, aa5, ten5, _ = rows
    return f"""## CI gate on TTFT: false alarms and detection (`gate`)

`python -m bench gate` — {machine()}. {load}

Method (real runs, no simulation): {len(runs[200.0])} runs against a synthetic server at
200 ms TTFT, {len(runs[220.0])} at 220 ms (+10 %) and {len(runs[240.0])} at 240 ms (+20 %), every
run the exact `make ci-gate` load (`{" ".join(LOAD_ARGS)}`; server `{" ".join(SERVER_ARGS)}`),
interleaved so machine noise hits every level alike; {min(n)}–{max(n)} measured streamed
requests per run; {elapsed:.0f} s in all. The gate at its defaults: p{cfg.percentile:g} TTFT,
max regression +{cfg.max_regression * 100:g} %, {cfg.confidence:.0%} one-sided bootstrap bounds
({cfg.resamples} resamples of both samples, fixed seed). A/A pairs are all pairs of distinct
200 ms runs; detection pairs are every (200 ms run, regressed run) pair. Pairs share runs, so
they are not independent trials: read the rates as estimates from {counts} runs.

{chr(10).join(table)}

- **False-alarm rate: {aa.fail}/{aa.pairs}** A/A pairs failed the gate
  ({aa.inconclusive} inconclusive).
- **+20 %: detected in {twenty.fail}/{twenty.pairs}** pairs.
- **+10 %: detected in {ten.fail}/{ten.pairs}** pairs. A +10 % slowdown sits on the default
  threshold (`--max-regression 10%`), and the gate fails only when the regression is *beyond*
  the threshold with 95 % confidence, so it is by design not expected to catch it. The same
  pairs gated with `--max-regression 5%`: +10 % detected in {ten5.fail}/{ten5.pairs}, A/A
  false alarms {aa5.fail}/{aa5.pairs}.
- Levels are the server's TTFT setting; the observed p95 moves a little less (+20 % setting:
  {twenty.median_change:+.1f}%) because the ±20 ms jitter and the client's own milliseconds do
  not scale with it. The synthetic server's TTFT is uniform ±20 ms around its setting, so p95
  sits near the top of that band; a real model's longer tail gives wider intervals (and more
  inconclusive verdicts) at the same run length.
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench gate", description=__doc__)
    p.add_argument("--base-runs", type=int, default=7, help="200 ms runs (7 -> 21 A/A pairs)")
    p.add_argument("--regressed-runs", type=int, default=3, help="runs at 220 and at 240 ms")
    p.add_argument("--no-write", action="store_true", help="print, do not touch BENCHMARKS.md")
    args = p.parse_args(argv)
    load1 = os.getloadavg()[0]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
        runs = collect(args.base_runs, args.regressed_runs, Path(tmp))
        cfg = GateConfig()
        rows = score(runs, cfg) + score(runs, GateConfig(max_regression=0.05))
    load = f"{load_note(load1)}; {os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores."
    text = render(rows, runs, cfg, time.monotonic() - t0, load)
    print(text)
    if not args.no_write:
        write_section("gate", text)
    return 0
