"""``python -m bench run-drift``: what moves TTFT p95 between runs of an unchanged build.

The gate across runs needs the run-to-run spread of a run's TTFT p95 to be small
against the allowance (2-3 % for a +20 % regression to fail 19 times in 20 at the
default +10 %: docs/reports.md, "The gate across runs").  This measures where
that spread comes from on the bundled real model at ``make loadtest``'s load
(20 users, 3 s pacing): one server, one long run, cut into back-to-back windows
of 30 s to 5 minutes.  Each window stands for a run of that length on a server of
that age, so the table shows how the spread shrinks (or not) with the length of a
run, whether the server drifts over its life (a trend across windows), and how
much of it follows the host's CPU *steal* — the share of this virtual machine's
CPU time the hypervisor gave other guests, sampled every second beside the run
(``loadtests.run.health``).  Also the shape of the TTFT distribution that the p95
sits in.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench import calibration
from bench.gate_history import load_args, one_run, spread
from bench.mdsection import load_note, machine, write_section
from llmload.bundled import ENGINE_ARGS, READY_TIMEOUT_S
from llmload.loadtests.run.health import host_times
from llmload.target_server.launch import launch

WINDOWS_S = (30, 60, 120, 300)


class StealLog:
    """The host's (time, all CPU seconds, stolen seconds), once a second, in a thread."""

    def __init__(self) -> None:
        self.points: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StealLog:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(2)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.points.append((time.time(), *host_times()))
            self._stop.wait(1.0)

    def share(self, a: float, b: float) -> float:
        """Steal as % of the host's CPU time between wall-clock times ``a`` and ``b``."""
        inside = [p for p in self.points if a <= p[0] <= b]
        if len(inside) < 2 or inside[-1][1] <= inside[0][1]:
            return math.nan
        return 100.0 * (inside[-1][2] - inside[0][2]) / (inside[-1][1] - inside[0][1])


def windows(
    rec: list[tuple[float, float]], steal: StealLog, width: float
) -> tuple[list[float], list[float]]:
    """TTFT p95 (ms) and steal (%) of each whole ``width``-second window of the run."""
    start, end = rec[0][0], rec[-1][0]
    p95s, steals = [], []
    a = start
    while a + width <= end + 1:
        vals = [t for at, t in rec if a <= at < a + width]
        if vals:
            p95s.append(1000 * float(np.percentile(vals, 95)))
            steals.append(steal.share(a, a + width))
        a += width
    return p95s, steals


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench run-drift", description=__doc__)
    p.add_argument("--duration", default="600s", help="the long run's measured time (600s)")
    p.add_argument("--users", type=int, default=20, help="paced users (20)")
    p.add_argument("--pacing", default="3s", help="start-to-start per user (3s: make loadtest)")
    p.add_argument(
        "--scenario", default="mix", help="the workload's scenario or weights (mix: the default)"
    )
    p.add_argument("--no-write", action="store_true", help="print, do not touch BENCHMARKS.md")
    args = p.parse_args(argv)
    load = [*load_args(args.users, args.duration, args.pacing), "--scenario", args.scenario]
    load1 = os.getloadavg()[0]
    cal = calibration.current()
    t0 = time.monotonic()
    server = ["--engine", "transformers", *ENGINE_ARGS["transformers"], "--log-level", "warning"]
    with (
        tempfile.TemporaryDirectory(prefix="bench-run-drift-") as tmp,
        launch(server, ready_timeout=READY_TIMEOUT_S) as srv,
    ):
        one_run(srv.url, Path(tmp) / "warm", load_args(args.users, "10s", "1s"))
        with StealLog() as steal:
            run = one_run(srv.url, Path(tmp) / "long", load)
    timed = [r for r in run.measured if r.status == "ok" and r.ttft_s is not None]
    ok = sorted((r.started_at, float(r.ttft_s)) for r in timed)
    ttft = np.array([t for _, t in ok]) * 1000
    rows = []
    by_window = "fewer than two"
    for width in WINDOWS_S:
        p95s, steals = windows(ok, steal, width)
        if len(p95s) < 2:
            continue
        corr = float(np.corrcoef(p95s, steals)[0, 1]) if len(p95s) > 2 else math.nan
        rows.append(
            f"| {width} s | {len(p95s)} | {spread(p95s):.1f} % | {min(p95s):.1f}–"
            f"{max(p95s):.1f} | {np.nanmin(steals):.1f}–{np.nanmax(steals):.1f} % | {corr:+.2f} |"
        )
        if width == WINDOWS_S[1]:
            by_window = ", ".join(f"{x:.0f} ({s:.1f} %)" for x, s in zip(p95s, steals, strict=True))
    scen_rows = []
    for name in sorted({r.scenario for r in run.measured}):
        mine = sorted((r.started_at, float(r.ttft_s)) for r in timed if r.scenario == name)
        lengths = [r.prompt_tokens or 0 for r in run.measured if r.scenario == name]
        p95s, _ = windows(mine, steal, WINDOWS_S[1])
        if len(p95s) > 1:
            scen_rows.append(
                f"| {name} | {len(mine)} | {min(lengths)}–{max(lengths)} | "
                f"{1000 * float(np.percentile([t for _, t in mine], 95)):.1f} | "
                f"{spread(p95s):.1f} % |"
            )
    fast = float(np.mean(ttft < 20)) * 100
    tail = float(np.mean(ttft >= 40)) * 100
    text = "\n".join(
        [
            "## What moves TTFT p95 between runs (`run-drift`)",
            "",
            f"`python -m bench run-drift` — {machine()}; {cal.line()}. {load_note(load1)}; "
            f"{time.monotonic() - t0:.0f} s in all. A lab figure: our own bundled server on "
            "the load generator's machine.",
            "",
            "Method: the embedded transformers engine, one server, one run of `"
            + " ".join(load)
            + "` after a discarded warm-up run, cut into back-to-back windows; each window "
            "stands for a run of that length. Steal: the host's CPU time the hypervisor gave "
            "other guests, % of all its CPUs' time in that window.",
            "",
            "| window | windows | spread of TTFT p95 | TTFT p95, ms | steal | correlation "
            "of p95 with steal |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            f"TTFT p95 by 60-s window in run order, ms (steal): {by_window}. The distribution "
            f"it sits in ({len(ttft)} requests): {fast:.0f} % of first tokens within 20 ms, "
            f"{tail:.1f} % at 40 ms or more; p50 {np.percentile(ttft, 50):.1f} ms, p90 "
            f"{np.percentile(ttft, 90):.1f} ms, p95 {np.percentile(ttft, 95):.1f} ms, p99 "
            f"{np.percentile(ttft, 99):.1f} ms.",
            "",
            "By scenario (the default workload's mix), TTFT p95 over the run and its spread "
            f"across the {WINDOWS_S[1]}-s windows:",
            "",
            "| scenario | requests | prompt tokens | TTFT p95, ms | spread of p95 |",
            "|---|---|---|---|---|",
            *scen_rows,
        ]
    )
    print(text)
    if not args.no_write:
        write_section("run-drift", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
