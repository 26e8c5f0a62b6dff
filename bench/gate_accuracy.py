"""``python -m bench gate``: the gate's false-alarm and detection rates on real short runs.

Every run is the exact ``make ci-gate`` load (``llmload.ci.LOAD_ARGS``: 32 users,
2 s warm-up, 10 s streaming) against a bundled synthetic server, and every pair is
gated as ``llmload report gate --metric ttft,itl,throughput`` gates it (one Holm
family of three checks).  The servers:

* the baseline: TTFT 200 ms, ITL 10 ms, ±20 ms jitter on every token time;
* TTFT +10 % / +20 %: the first token 220 / 240 ms, the rest unchanged;
* ITL +10 % / +20 %: every later token's time (ITL and its jitter) stretched 1.1 / 1.2×;
* throughput −10 % / −20 %: the whole answer stretched 1/0.9 / 1/0.8× (TTFT, ITL, jitter),
  so 8 back-to-back users get that much fewer tokens per second.

Runs are interleaved (one of each level in turn) so the machine's changing load
touches every level alike.  A/A pairs are every pair of distinct baseline runs
(earlier one as the baseline); detection pairs are every (baseline run, regressed run).
Pairs share runs, so they are not independent trials.  ``--starved-runs K`` adds K
baseline-server and K TTFT +20 % runs with two busy loops pinned to each core
(``bench.busy``), gated against the quiet baselines: a starved client must raise no
false alarm, and — judged by each request's send side — still catch the regression.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench import calibration
from bench.mdsection import load_note, machine, write_section
from llmload.ci import LOAD_ARGS, SERVER_ARGS, SERVER_TTFT_MS, run_load, synthetic_server
from llmload.loadtests.percentile import percentile_of
from llmload.reports.build import build_run
from llmload.reports.gate.baseline import make_baseline
from llmload.reports.gate.verdict import FAIL, INCONCLUSIVE, GateConfig, GateResult, evaluate
from llmload.reports.table.loader import Run, load_run

NAN = float("nan")
METRICS = "ttft,itl,throughput"


@dataclass(frozen=True)
class Level:
    """One server: which metric it makes worse (None: the baseline) and by how much."""

    name: str
    metric: str | None = None
    worse: float = 0.0

    def server(self) -> tuple[float, float]:
        """``(TTFT ms, token-time scale)`` of the synthetic server."""
        if self.metric == "ttft":
            return SERVER_TTFT_MS * (1 + self.worse), 1.0
        if self.metric == "itl":
            return SERVER_TTFT_MS, 1 + self.worse
        if self.metric == "throughput":
            k = 1 / (1 - self.worse)
            return SERVER_TTFT_MS * k, k
        return SERVER_TTFT_MS, 1.0


BASE = Level("A/A")
REGRESSED = tuple(
    Level(f"{label} {sign}{pct}%", metric, pct / 100)
    for metric, label, sign in (
        ("ttft", "TTFT", "+"),
        ("itl", "ITL", "+"),
        ("throughput", "throughput", "−"),
    )
    for pct in (10, 20)
)
STARVED_LEVELS = (Level("A/A, client starved"), Level("TTFT +20%, client starved", "ttft", 0.2))


@contextmanager
def busy_loops() -> Iterator[None]:
    """Two busy loops pinned to each core (``bench.busy``) while the block runs."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.busy", str(cpu), "2", "120"], start_new_session=True
        )
        for cpu in range(os.cpu_count() or 1)
    ]
    try:
        time.sleep(1.0)
        yield
    finally:
        for p in procs:  # the loops are the children: end the whole group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            p.wait(10)


def collect(counts: dict[Level, int], tmp: Path, busy: bool = False) -> dict[Level, list[Run]]:
    """Interleaved real runs per level (under busy loops when ``busy``)."""
    runs: dict[Level, list[Run]] = {lv: [] for lv in counts}
    with ExitStack() as stack:
        urls = {}
        for lv in counts:
            ttft, scale = lv.server()
            urls[lv] = stack.enter_context(synthetic_server(ttft, token_scale=scale))
        for i in range(max(counts.values(), default=0)):
            for lv, n in counts.items():
                if i >= n:
                    continue
                slug = "".join(ch if ch.isalnum() else "_" for ch in lv.name)
                out = tmp / f"{'busy-' if busy else ''}{slug}-{i}"
                with busy_loops() if busy else ExitStack():
                    run_load(out, urls[lv], report=False)
                runs[lv].append(load_run(out))
                print(f"  {out.name}: {len(runs[lv][-1].measured)} requests", flush=True)
    return runs


@dataclass
class Row:
    """Verdict counts for one level at one allowance."""

    label: str
    pairs: int
    fail: int
    on_metric: int
    inconclusive: int
    median_change: float
    lo: float
    hi: float


def _change(result: GateResult, metric: str) -> float:
    c = next((c for c in result.checks if c.numbers.get("metric") == metric), None)
    return float(c.numbers["change_pct"]) if c and "change_pct" in c.numbers else NAN


def score(level: Level, pairs: list[tuple[dict, Run]], cfg: GateConfig) -> Row:
    """Gate every pair of a level; count verdicts, and failures on the level's own metric."""
    results = [evaluate(run, base, cfg) for base, run in pairs]
    metric = level.metric or "ttft"
    changes = [x for r in results if (x := _change(r, metric)) == x] or [NAN]
    on_metric = sum(
        any(c.verdict == FAIL and c.numbers.get("metric") == level.metric for c in r.checks)
        for r in results
    )
    return Row(
        f"{level.name}, max {cfg.max_regression * 100:g}%",
        len(results),
        sum(r.verdict == FAIL for r in results),
        on_metric,
        sum(r.verdict == INCONCLUSIVE for r in results),
        statistics.median(changes),
        min(changes),
        max(changes),
    )


def pairs_of(level: Level, runs: dict[Level, list[Run]], baselines: list[dict]) -> list:
    """A/A: every pair of distinct baseline runs; otherwise every (baseline, level run)."""
    if level is BASE:
        base = runs[BASE]
        return [(baselines[i], base[j]) for i, j in itertools.combinations(range(len(base)), 2)]
    return [(b, r) for b in baselines for r in runs[level]]


def client_line(runs: list[Run]) -> str:
    """The starved runs' client evidence: send side p99 and loop lag p99, and the trust box."""
    sends, lags, levels = [], [], []
    for run in runs:
        sends.append(percentile_of([r.send_s for r in run.measured if r.send_s], 99) or NAN)
        for ph in run.meta.get("phases") or []:
            for p in ((ph.get("health") or {}).get("processes") or {}).values():
                if ph.get("name") != "warmup":
                    lags.append(float(p.get("lag_p99_ms", NAN)))
        trust = build_run(run.path).trust or {}
        harness = next((i for i in trust.get("items", []) if i["check"] == "harness health"), {})
        levels.append(str(harness.get("level", "?")))
    return (
        f"send side p99 {min(sends) * 1000:.1f}–{max(sends) * 1000:.1f} ms, loop lag p99 "
        f"{min(lags, default=NAN):.0f}–{max(lags, default=NAN):.0f} ms; trust box harness "
        f"item: {', '.join(sorted(set(levels)))}"
    )


def render(
    rows: list[Row],
    rows5: list[Row],
    starved: list[Row],
    starved_note: str,
    runs: dict[Level, list[Run]],
    elapsed: float,
    load: str,
) -> str:
    """The BENCHMARKS.md section."""
    n = [len(r.measured) for rs in runs.values() for r in rs]
    header = [
        "| level (server), allowance: pairs | gate fails (exit 1) | on its own metric | "
        "inconclusive (exit 2) | median Δ of its metric | Δ range |",
        "|---|---|---|---|---|---|",
    ]

    def table(rs: list[Row]) -> str:
        return "\n".join(
            header
            + [
                f"| {r.label}: {r.pairs} | {r.fail}/{r.pairs} | {r.on_metric}/{r.pairs} | "
                f"{r.inconclusive}/{r.pairs} | {r.median_change:+.1f}% | "
                f"{r.lo:+.1f}% … {r.hi:+.1f}% |"
                for r in rs
            ]
        )

    aa = rows[0]
    twenty = [r for r in rows if "20%" in r.label]
    counts = ", ".join(f"{len(v)} {lv.name}" for lv, v in runs.items())
    starved_text = (
        f"""
With the client starved (two busy loops pinned to each core, `python -m bench.busy`;
{starved_note}), gated against the same quiet baselines:

{table(starved)}
"""
        if starved
        else ""
    )
    return f"""## CI gate on a whole SLO: false alarms and detection (`gate`)

`python -m bench gate` — {machine()}. {load}

Method (real runs, no simulation): every run the exact `make ci-gate` load
(`{" ".join(LOAD_ARGS)}`) against a bundled synthetic server (baseline `--ttft-ms
{SERVER_TTFT_MS:g} {" ".join(SERVER_ARGS)}`; TTFT levels change the first token only, ITL
levels stretch every later token's time, throughput levels stretch the whole answer);
runs interleaved so machine noise hits every level alike: {counts};
{min(n)}–{max(n)} measured streamed requests per run; {elapsed:.0f} s in all. Every pair is
gated as `llmload report gate --metric {METRICS}` gates it: one family of three checks,
Holm–Bonferroni at 95 % family-wise confidence, bootstrap of both samples (2,000
resamples, fixed seed). A/A pairs are all pairs of distinct baseline runs; detection pairs
are every (baseline run, regressed run). Pairs share runs, so they are not independent
trials: read the rates as estimates.

{table(rows)}

- **False alarms: {aa.fail}/{aa.pairs}** A/A pairs failed ({aa.inconclusive} inconclusive).
- **+20 % on one metric: detected in
  {", ".join(f"{r.fail}/{r.pairs} ({r.label.split(',')[0]})" for r in twenty)}**.
- A +10 % change sits on the default allowance, and the gate fails only beyond it with
  95 % confidence, so it is by design not expected to catch it. The same A/A and +10 %
  pairs at `--max-regression 5%`:

{table(rows5)}
{starved_text}
- Levels are the server's settings; the observed change moves a little less (the ±20 ms
  jitter and the client's own milliseconds do not scale with a TTFT setting).
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench gate", description=__doc__)
    p.add_argument("--base-runs", type=int, default=7, help="baseline runs (7 -> 21 A/A pairs)")
    p.add_argument("--regressed-runs", type=int, default=3, help="runs per regressed level")
    p.add_argument("--starved-runs", type=int, default=3, help="runs per starved level (0: none)")
    p.add_argument("--no-write", action="store_true", help="print, do not touch BENCHMARKS.md")
    args = p.parse_args(argv)
    load1 = os.getloadavg()[0]
    calibration.current()  # measured before the runs load the machine (write_section adds it)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
        counts = {BASE: args.base_runs, **{lv: args.regressed_runs for lv in REGRESSED}}
        runs = collect(counts, Path(tmp))
        starved_runs = (
            collect({lv: args.starved_runs for lv in STARVED_LEVELS}, Path(tmp), busy=True)
            if args.starved_runs
            else {}
        )
        baselines = [make_baseline(r) for r in runs[BASE]]
        cfg, cfg5 = GateConfig(metric=METRICS), GateConfig(metric=METRICS, max_regression=0.05)
        rows = [score(lv, pairs_of(lv, runs, baselines), cfg) for lv in (BASE, *REGRESSED)]
        near = (BASE, *(lv for lv in REGRESSED if lv.worse < 0.15))
        rows5 = [score(lv, pairs_of(lv, runs, baselines), cfg5) for lv in near]
        starved = [
            score(lv, pairs_of(lv, starved_runs, baselines), cfg)
            for lv in STARVED_LEVELS
            if starved_runs
        ]
        note = client_line([r for rs in starved_runs.values() for r in rs]) if starved else ""
    load = f"{load_note(load1)}; {os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores."
    text = render(rows, rows5, starved, note, runs, time.monotonic() - t0, load)
    print(text)
    if not args.no_write:
        write_section("gate", text)
    return 0
