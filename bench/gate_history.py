"""``python -m bench gate-history``: the gate across runs on the bundled real model.

A gate is worth what it says about the *next* run of an unchanged build.  This
runs the embedded transformers engine (continuous batching, ``make loadtest``'s
default target) as two servers side by side: **A**, the build as it is, and **B**,
the same build with a real slowdown it states (``--regressed``, by default a
smaller prefill budget, ``--prefill-budget 256``: long prompts prefill in more
chunks, each waiting for a decode step of the running streams — vLLM's
``--max-num-batched-tokens`` lowered; a smaller batch, ``--max-concurrency 18``,
made queueing cliffs instead of a steady slowdown).  After one discarded
run on each (a server's first run is slower: its caches and allocator warm up),
``--history`` runs of A make the first history; then A and B take turns, so the
machine's drift touches both alike.  Each A run is gated against the last
``--history`` A runs before it (A/A: every fail is a false alarm) and each B run
against the same (detection), with the default TTFT gate, three ways:

* **history** — ``report gate --history``: run-level values, pooled t interval;
* **single baseline** — the gate before: the run against the latest A run alone
  (the within-run bootstrap, blind to the spread between runs);
* **whole SLO** — the history gate over ``--metric ttft,itl,throughput,error-rate``
  as one Holm family.

Also the runs' own TTFT p95 in the order they ran, their run-to-run spread, and
the regression's size measured side by side (B over A, mean of the run-level p95s).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import calibration
from bench.mdsection import load_note, machine, write_section
from llmload.bundled import ENGINE_ARGS, READY_TIMEOUT_S
from llmload.reports.gate.baseline import make_baseline
from llmload.reports.gate.history import decide, evaluate_runs, sees
from llmload.reports.gate.holm import bonferroni_level
from llmload.reports.gate.result import FAIL, INCONCLUSIVE, GateConfig
from llmload.reports.gate.verdict import evaluate
from llmload.reports.table.loader import Run, load_run
from llmload.target_server.launch import launch

WAYS = ("history", "single baseline", "whole SLO (history)")
SLO = "ttft,itl,throughput,error-rate"


def load_args(users: int, duration: str, pacing: str) -> list[str]:
    return [
        *("--users", str(users), "--spawn-rate", str(users), "--pacing", pacing),
        *("--duration", duration, "--warmup", "5s", "--modes", "stream"),
    ]


def one_run(url: str, path: Path, load: list[str]) -> Run:
    cmd = [sys.executable, "-m", "llmload.loadtests", "run", "--target", url, *load]
    subprocess.run(
        [*cmd, "--out", str(path), "--no-report", "--status-interval", "60"],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=900,
    )
    return load_run(path)


def p95(run: Run) -> float:
    t = run.measured
    vals = [r.ttft_s for r in t if r.status == "ok" and r.ttft_s is not None]
    vals.sort()
    return 1000 * vals[min(len(vals) - 1, int(math.ceil(0.95 * len(vals))) - 1)]


@dataclass
class Tally:
    """One way of gating, over the A/A gates and the detection gates."""

    aa: list[str] = field(default_factory=list)
    ab: list[str] = field(default_factory=list)

    def line(self, way: str) -> str:
        def count(xs: list[str], v: str) -> int:
            return sum(x == v for x in xs)

        return (
            f"| {way} | {count(self.aa, FAIL)} of {len(self.aa)} "
            f"({count(self.aa, INCONCLUSIVE)} inconclusive) | {count(self.ab, FAIL)} of "
            f"{len(self.ab)} ({count(self.ab, INCONCLUSIVE)} inconclusive) |"
        )


#: what the history gate said it could see, per gate: (power at +20 %, its words)
SAID: list[tuple[float, str]] = []


def verdicts(run: Run, history: list[dict[str, Any]]) -> dict[str, str]:
    """The three ways' verdicts for ``run`` against the A runs in ``history``."""
    out = {}
    for way, metric in (("history", "ttft"), ("whole SLO (history)", SLO)):
        cfg = GateConfig(metric=metric)
        levels = evaluate_runs(run, history, cfg, ["stream"])
        assert levels is not None
        checks = decide(levels, cfg)
        if way == "history":
            (lv,) = levels
            level = bonferroni_level(1.0 - cfg.confidence, 1)
            SAID.append((lv.power(level), sees(lv, level)))
        out[way] = (
            FAIL
            if any(c.verdict == FAIL for c in checks)
            else INCONCLUSIVE
            if any(c.verdict == INCONCLUSIVE for c in checks)
            else "pass"
        )
    out["single baseline"] = evaluate(run, history[-1], GateConfig()).verdict
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench gate-history", description=__doc__)
    p.add_argument("--pairs", type=int, default=20, help="A/B turns after the history (20)")
    p.add_argument("--history", type=int, default=5, help="A runs a gate reads (5)")
    p.add_argument("--users", type=int, default=20, help="paced users per run (20)")
    p.add_argument("--pacing", default="1s", help="start-to-start per user (1s)")
    p.add_argument("--duration", default="20s", help="measured seconds per run (20s)")
    p.add_argument(
        "--regressed",
        default="--prefill-budget 256",
        help="server flags of the regressed build B (a smaller prefill budget: "
        "--prefill-budget 256)",
    )
    p.add_argument("--no-write", action="store_true", help="print, do not touch BENCHMARKS.md")
    args = p.parse_args(argv)
    load1 = os.getloadavg()[0]
    cal = calibration.current()  # before the runs load the machine
    t0 = time.monotonic()
    server = ["--engine", "transformers", *ENGINE_ARGS["transformers"], "--log-level", "warning"]
    load = load_args(args.users, args.duration, args.pacing)
    tallies = {w: Tally() for w in WAYS}
    a_p95: list[float] = []
    b_p95: list[float] = []
    order: list[str] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-gate-history-") as tmp,
        launch(server, ready_timeout=READY_TIMEOUT_S) as a,
        launch([*server, *args.regressed.split()], ready_timeout=READY_TIMEOUT_S) as b,
    ):
        one_run(a.url, Path(tmp) / "a-warm", load)
        one_run(b.url, Path(tmp) / "b-warm", load)
        docs: list[dict[str, Any]] = []
        for i in range(args.history):
            run = one_run(a.url, Path(tmp) / f"a{i}", load)
            docs.append(make_baseline(run))
            a_p95.append(p95(run))
            order.append(f"A {a_p95[-1]:.1f}")
        for i in range(args.pairs):
            for name, srv in (("a", a), ("b", b)):
                run = one_run(srv.url, Path(tmp) / f"{name}{args.history + i}", load)
                got = verdicts(run, docs[-args.history :])
                for way, verdict in got.items():
                    (tallies[way].aa if name == "a" else tallies[way].ab).append(verdict)
                if name == "a":
                    docs.append(make_baseline(run))
                    a_p95.append(p95(run))
                else:
                    b_p95.append(p95(run))
                order.append(f"{name.upper()} {(a_p95 if name == 'a' else b_p95)[-1]:.1f}")
                print(f"  {name}{i}: {order[-1]} ms {got}", flush=True)
    text = render(args, tallies, a_p95, b_p95, order, cal.line(), load1, time.monotonic() - t0)
    print(text)
    if not args.no_write:
        write_section("gate-history", text)
    return 0


def spread(xs: list[float]) -> float:
    """One standard deviation of ``xs`` on the log scale, as a % (nan below two values)."""
    logs = [math.log(x) for x in xs]
    return (math.exp(statistics.stdev(logs)) - 1) * 100 if len(logs) > 1 else float("nan")


def render(
    args: argparse.Namespace,
    tallies: dict[str, Tally],
    a_p95: list[float],
    b_p95: list[float],
    order: list[str],
    cal: str,
    load1: float,
    seconds: float,
) -> str:
    effect = (statistics.fmean(b_p95) / statistics.fmean(a_p95) - 1) * 100 if b_p95 else math.nan
    return "\n".join(
        [
            "## The gate across runs on the bundled real model (`gate-history`)",
            "",
            f"`python -m bench gate-history` — {machine()}; {cal}. {load_note(load1)}; "
            f"{seconds:.0f} s in all.",
            "",
            f"Method: the embedded transformers engine as two servers side by side, A (as it "
            f"is) and B (`{args.regressed}`: a stated slowdown), each run `"
            + " ".join(load_args(args.users, args.duration, args.pacing))
            + f"`; after a discarded first run on each, {args.history} A runs make the "
            f"history, then A and B take turns ({args.pairs} each). Each A run is gated "
            f"against the {args.history} A runs before it (A/A: a fail is a false alarm), "
            "each B run against the same (detection); default allowance +10 %, 95 %.",
            "",
            "| gate | A/A fails | B (regressed) fails |",
            "|---|---|---|",
            *(tallies[w].line(w) for w in WAYS),
            "",
            f"The regression, measured side by side: B's TTFT p95 is **{effect:+.1f} %** "
            f"over A's (means of the run-level p95s). Run-to-run spread of the A runs' TTFT "
            f"p95: {spread(a_p95):.1f} % (one standard deviation, log scale); B's: "
            f"{spread(b_p95):.1f} %. TTFT p95 by run, ms, in the order they ran: "
            + ", ".join(order)
            + ".",
            "",
            said(),
        ]
    )


def said() -> str:
    """What the history gate said of itself over the bench's gates (its median power)."""
    if not SAID:
        return ""
    powers = sorted(p for p, _ in SAID)
    mid = statistics.median(powers)
    words = min(SAID, key=lambda ps: abs(ps[0] - mid))[1]
    return (
        f"What the history gate said it could see, from each history's own spread (its "
        f"{len(SAID)} TTFT gates): a true +20 % change failed {min(powers):.0%}–"
        f"{max(powers):.0%} of the time, median {mid:.0%}; at the median its words were "
        f'"{words}".'
    )


if __name__ == "__main__":
    sys.exit(main())
