"""``llmload capacity``: the highest load a deployment sustains within its SLOs, searched for.

The command line of the capacity search, and its wiring: one run
(``loadtests.run.runner.run(phases=...)``) whose phases are the search's steps, so
``requests.jsonl``, ``run.json``, the exporter, Grafana annotations, the report
and the gate see every step; the bundled server first when ``--target`` is empty.

Open loop (``--rate``): the load is requests/s and latency counts from the
intended send time.  Closed loop (``--users``): the load is back-to-back users.
A trace (``--dataset trace FILE``) keeps its own timing: the load is its speedup
(``--speedup``).  Agent sessions (``--dataset agent``): ``--rate`` is sessions/s,
``--users`` users running sessions; the SLOs are on their requests.
The steps themselves: ``llmload.capacity.plan``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import Any

import llmload.run as wiring  # before locust: gevent-patches the process
from llmload.capacity.plan import OPEN_LOOP_CAP, CapacityOptions, CapacitySearch
from llmload.loadtests.durations import parse_duration, parse_fraction
from llmload.loadtests.options import AGENT, RunOptions, trace_file
from llmload.loadtests.run import cli as loadtests_cli
from llmload.loadtests.run import runner
from llmload.loadtests.run.capacity import SearchConfig
from llmload.loadtests.run.context import ResolvedRun
from llmload.loadtests.run.scrape import FILE as SERVER_FILE
from llmload.loadtests.run.scrape import ServerScraper
from llmload.loadtests.run.sinks import RecordSink
from llmload.loadtests.workload.agent import STEPS as AGENT_STEPS
from llmload.loadtests.workload.replay import Pace, window_of
from llmload.loadtests.workload.traces import read_trace
from llmload.reports.capacity.judge import Criterion, parse_capacity_slo

DEFAULT_SLO = "ttft_p95=600ms"
#: flags of ``llmload run`` that a search sets itself
NOT_HERE = ("--duration", "--num-prompts", "--shape", "--modes", "--pacing", "--rate", "--users")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llmload capacity",
        description="Find the highest load the target sustains within its SLOs. Every "
        "`llmload run` option for the target, the workload and the output also applies "
        "(--target, --scenario, --dataset, --max-tokens, --out, --metrics-port, ...).",
    )
    g = p.add_argument_group("search")
    how = g.add_mutually_exclusive_group()
    how.add_argument(
        "--rate",
        nargs="?",
        type=float,
        const=1.0,
        metavar="START",
        help="open loop: search requests/s (--dataset agent: sessions/s), from START (1)",
    )
    how.add_argument(
        "--users",
        nargs="?",
        type=int,
        const=1,
        metavar="START",
        help="closed loop: search back-to-back users (--dataset agent: each running sessions), "
        "from START (1; the default search)",
    )
    how.add_argument(
        "--speedup",
        nargs="?",
        type=float,
        const=1.0,
        metavar="START",
        help="--dataset trace: search the replay's speedup (its own timing, scaled), from "
        "START (1; the search a trace gets)",
    )
    g.add_argument(
        "--slo",
        default=DEFAULT_SLO,
        help=f"SLOs: ttft_p95=600ms,tpot_p95=50ms or "
        f"goodput=95%%,ttft=600ms,tpot=50ms ({DEFAULT_SLO})",
    )
    g.add_argument("--budget", default="10m", help="time for the whole search (10m)")
    g.add_argument("--tolerance", default="10%", help="stop when the bracket is this narrow (10%%)")
    g.add_argument("--confidence", type=float, default=0.95, help="for each step's verdict (0.95)")
    g.add_argument("--min", dest="minimum", type=float, help="lowest load to try (start/16)")
    g.add_argument("--max", dest="maximum", type=float, help="highest load to try (none)")
    g.add_argument("--mode", choices=("stream", "sync"), default="stream", help="request mode")
    g.add_argument("--step-requests", type=int, default=0, help="requests per step (auto)")
    g.add_argument("--min-step", default="5s", help="shortest step (5s)")
    g.add_argument("--max-step", default="2m", help="longest step (2m)")
    g.add_argument(
        "--warmup",
        default="10s",
        help="warm-up before the first step (10s); auto: none, each step judged on its "
        "steady part (MSER-5 on its requests' TTFT)",
    )
    g.add_argument(
        "--concurrency-cap",
        type=int,
        default=OPEN_LOOP_CAP,
        help=f"open loop: most requests in flight ({OPEN_LOOP_CAP})",
    )
    g.add_argument(
        "--sweep",
        type=int,
        default=0,
        metavar="N",
        help="no search: N loads evenly from --min to --max (for comparison)",
    )
    g.add_argument("--engine", help="no --target: the bundled server's engine")
    g.add_argument("--server-arg", action="append", default=[], help="bundled-server argument")
    return p


def parse(argv: Sequence[str]) -> tuple[CapacityOptions, RunOptions, list[str]]:
    """Capacity options, the run's options, the command line for run.json; ``ValueError``."""
    ns, rest = parser().parse_known_args(list(argv))
    for flag in NOT_HERE:
        if any(a == flag or a.startswith(flag + "=") for a in rest):
            raise ValueError(f"{flag} is set by the search (see llmload capacity --help)")
    criteria = tuple(parse_capacity_slo(ns.slo))
    inv = loadtests_cli.parse(["run", *rest, "--modes", ns.mode, "--pacing", "0s"])
    assert inv.options is not None
    trace = trace_file(inv.options.workload.dataset)
    replay, trace_info = None, None
    if trace:
        if ns.rate is not None or ns.users is not None:
            raise ValueError(
                "--dataset trace keeps the trace's own timing: the search is over its pace "
                "(--speedup [START]), not --rate or --users"
            )
        replay, trace_info = _trace_pace(trace, inv.options.workload.trace_window)
    elif ns.speedup is not None:
        raise ValueError("--speedup searches a trace replay's pace: it needs --dataset trace FILE")
    open_loop = ns.rate is not None or replay is not None
    if replay is not None:
        start = float(ns.speedup or 1.0)
    else:
        start = float(ns.rate if ns.rate is not None else (ns.users or 1))
    minimum = ns.minimum if ns.minimum is not None else (start / 16 if open_loop else 1.0)
    if ns.sweep and ns.minimum is not None:
        start = minimum  # a sweep starts (and warms up) at its lowest load
    tolerance = parse_fraction(ns.tolerance)
    if not 0.5 <= ns.confidence < 1:
        raise ValueError("--confidence must be in [0.5, 1)")
    copts = CapacityOptions(
        criteria=criteria,
        open_loop=open_loop,
        start=start,
        minimum=minimum,
        maximum=ns.maximum,
        tolerance=tolerance,
        budget_s=parse_duration(ns.budget),
        confidence=ns.confidence,
        mode=ns.mode,
        step_requests=ns.step_requests,
        min_step_s=parse_duration(ns.min_step),
        max_step_s=parse_duration(ns.max_step),
        warmup_s=0.0 if ns.warmup.strip().lower() == "auto" else parse_duration(ns.warmup),
        warmup_auto=ns.warmup.strip().lower() == "auto",
        concurrency_cap=ns.concurrency_cap,
        engine=ns.engine or "",
        server_args=tuple(ns.server_arg),
        sweep=ns.sweep,
        replay=replay,
        trace=trace_info,
        session_steps=(
            (inv.options.workload.agent_steps or AGENT_STEPS)
            if inv.options.workload.dataset == AGENT
            else 0
        ),
    )
    if ns.sweep and (ns.sweep < 2 or ns.minimum is None or ns.maximum is None):
        raise ValueError("--sweep N needs N >= 2, --min and --max")
    SearchConfig(start=start, minimum=minimum, maximum=ns.maximum, tolerance=tolerance)  # checks
    label = inv.options.output.label or "capacity"
    opts = inv.options.with_(slo=_goodput_spec(criteria), label=label)
    if opts.distributed.workers or opts.distributed.master:
        raise ValueError("llmload capacity runs in one process (no --workers/--master yet)")
    if replay is not None and opts.workload.speedup != 1.0:
        raise ValueError("the search sets each step's speedup (--speedup START starts it)")
    if opts.connection.baseline_target or opts.load.repeat > 1:
        raise ValueError("--baseline-target and --repeat are for `llmload run`, not a search")
    argv_full = ["llmload", "capacity", *argv]
    return copts, opts, argv_full


def _trace_pace(path: str, window: str | None) -> tuple[Pace, dict[str, Any]]:
    """The pace a search over ``path`` scales (its ``--trace-window``), and what run.json says of
    it; ``ValueError`` (``FILE:LINE``) for a bad trace, or a window with no pace to scale."""
    kept, pace = window_of(read_trace(path), window)
    if pace.period is None or pace.rate is None:
        raise ValueError(
            f"{path}: the replayed requests ({len(kept)}) all fall at one time: a search over "
            "the trace's pace needs two or more at different times"
        )
    info = {
        "file": path,
        "window": window,
        "requests": len(kept),
        "lap_s": pace.period,
        "rate_per_s": pace.rate,
    }
    return pace, info


def _goodput_spec(criteria: Sequence[Criterion]) -> str:
    """The report's goodput SLO: every bound of the search (the tightest per metric)."""
    bounds: dict[str, float] = {}
    for c in criteria:
        for k, v in c.bounds_ms.items():
            bounds[k] = min(v, bounds.get(k, math.inf))
    return ",".join(f"{k}={v:g}ms" for k, v in bounds.items())


def search(
    copts: CapacityOptions,
    opts: RunOptions,
    argv: list[str],
    extra_info: dict[str, Any] | None = None,
) -> int:
    """Run the search against ``opts.target``; the exit code of the run."""
    plan = CapacitySearch(copts, opts)

    def sinks(run: ResolvedRun, info: dict[str, Any]) -> list[RecordSink]:
        out = [*wiring.run_sinks(run, info), plan]
        plan.server = next(
            (s for s in out if isinstance(s, ServerScraper) and s.path.name == SERVER_FILE), None
        )
        return out

    return runner.run(opts, argv, extra_info, sinks=sinks, report=wiring.report, phases=plan)


def main(argv: Sequence[str] | None = None) -> int:
    """``llmload capacity``; returns the exit code."""
    try:
        copts, opts, argv_full = parse(list(sys.argv[1:] if argv is None else argv))
    except (ValueError, OSError) as exc:
        print(f"llmload capacity: {exc}", file=sys.stderr)
        return runner.EXIT_USAGE
    return wiring.loadtest(
        opts,
        argv_full,
        engine=copts.engine,
        server_args=copts.server_args,
        go=lambda o, a, info: search(copts, o, a, info),
    )


if __name__ == "__main__":
    sys.exit(main())
