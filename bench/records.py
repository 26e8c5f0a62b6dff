"""``python -m bench records``: an hour of records — write, load, summary, report, gate.

A synthetic run of ``--records`` requests (default 1,000,000: an hour at ~280
req/s) shaped like ``make loadtest``'s: a sync phase and a stream phase, the
``mix`` scenarios (5 : 3 : 2 of 64, 256 and 128 tokens, as many ITL gaps as
tokens), TTFT ~100 ms, ITL ~20 ms, server timings, 1 % errors, and every field
this llmload's run writes (send side, TTFO, prefix-cache hits, reasoning, tool-call
and empty answers: ``synthetic_records``); ~2.4 KB per ``requests.jsonl`` line (the
issue's copied-out run: 1.7 KB).  Written by the run
writer itself (``loadtests.run.writer.RunWriter``, so ``--records-compression``
is what is timed), once per compression.  Then, in child processes so that each
peak RSS is its own:

* ``llmload report build`` as a user runs it (wall time, peak RSS, ``report.html``'s size);
* the same steps one by one (load, summary, html, vLLM JSON), each timed, with the
  peak RSS after it;
* ``llmload report baseline`` of the run and ``llmload report gate`` of the run
  against it on ``GATE_METRICS`` (wall time, peak RSS, exit code);
* Chromium opening ``report.html`` headless (wall time), when it is installed.

Goals (the issue's, on the 2-core machine): ``report build`` ≤ 60 s and ≤ 2 GiB
RSS at 1 M records, ``report.html`` ≤ 5 MB.  ``--no-write`` writes nothing
to BENCHMARKS.md; ``--records N`` and ``--compressions`` shrink it for a try.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.calibration import current
from bench.mdsection import load_average, machine, write_section

ROOT = Path(__file__).resolve().parent.parent
#: (scenario, max_tokens, weight) as ``--scenario mix`` draws them
MIX = (("short_qa", 64, 5), ("code_gen", 256, 3), ("long_summary", 128, 2))
RATE = 280.0
GOAL_S, GOAL_RSS, GOAL_HTML = 60.0, 2 * 2**30, 5_000_000
#: the gate's metrics: TTFT and ITL (a percentile of every request, of every gap), the rates
#: and the share (per-second series from every content event's arrival, each request's outcome)
GATE_METRICS = "ttft,itl,throughput,goodput,error-rate"


#: baseline files in the history ``report gate --history`` reads
HISTORY_RUNS = 5


def synthetic_records(n: int, seed: int = 0) -> Any:
    """``n`` records (``RequestRecord``), half a sync phase then half a stream phase.

    Every field a run of this llmload writes: the send side of each request (and its
    connection set-up on a user's first), TTFO, prefix-cache hits (``cached_tokens``),
    and a few answers of each shape — reasoning first (5 % of streams: TTFO after its
    reasoning events), a tool call (1 %), nothing visible (``no_output``, 0.5 %)."""
    from llmload.loadtests.measure.record import RequestRecord

    rng = random.Random(seed)
    weights = [w for _, _, w in MIX]
    t = 1.7e9
    for phase, count in (("sync", n // 2), ("stream", n - n // 2)):
        for i in range(count):
            scenario, tokens, _ = rng.choices(MIX, weights)[0]
            stream = phase == "stream"
            ok = rng.random() >= 0.01
            shape = rng.random()
            empty = ok and shape < 0.005
            tool = ok and 0.005 <= shape < 0.015
            reasoning = rng.randint(8, tokens // 2) if ok and stream and shape >= 0.95 else 0
            shows = ok and not empty
            ttft = 0.1 + rng.expovariate(40.0)
            gaps = [0.02 + rng.expovariate(400.0) for _ in range(tokens - 1)] if stream else []
            e2e = ttft + (sum(gaps) if stream else 0.02 * tokens)
            status = "ok" if ok else rng.choice(("http_5xx", "timeout", "disconnect"))
            prompt = rng.randint(20, 400)
            yield RequestRecord(
                request_id=uuid.UUID(int=rng.getrandbits(128)).hex,
                phase=phase,
                scenario=scenario,
                mode=phase,  # type: ignore[arg-type]  # the phase name is a mode here; the record types it as Literal
                endpoint="/v1/chat/completions",
                started_at=t,
                status=status,
                ttft_s=ttft if shows else None,
                e2e_s=e2e if ok else None,
                headers_s=0.0015 + rng.expovariate(2000.0),
                tpot_s=(sum(gaps) / (tokens - 1)) if shows and stream else None,
                itl_s=gaps if shows else [],
                output_tokens=tokens if ok else 0,
                token_source="usage",
                prompt_tokens=prompt,
                error=None if ok else f"{status}: synthetic failure",
                ttst_s=(ttft + gaps[0]) if shows and stream else None,
                tokens_per_event=([1] * tokens if stream else [tokens]) if shows else [],
                usage_output_tokens=tokens if ok else None,
                client_output_tokens=((tokens if stream else None) if shows else 0) if ok else None,
                server_ttft_s=ttft - 0.0008 if shows and stream else None,
                server_queue_s=0.0004 if shows and stream else None,
                server_e2e_s=e2e - 0.0008 if ok and stream else None,
                http_status=200 if ok else 500,
                user_id=i % 200,
                finish_reason=("tool_calls" if tool else "length") if ok else None,
                stream_end="done" if ok and stream else None,
                connect_s=0.0003 + rng.expovariate(4000.0) if i < 200 else None,
                ttfo_s=(ttft + sum(gaps[:reasoning])) if shows else None,
                reasoning_tokens=reasoning if ok else None,
                cached_tokens=(16 * rng.randint(0, prompt // 16) if shape < 0.4 else 0)
                if ok
                else None,
                tool_calls=1 if tool else 0,
                no_output=empty,
                send_s=0.0002 + rng.expovariate(5000.0),
            )
            t += 1.0 / RATE


def write_run(out: Path, n: int, compression: str = "none", seed: int = 0) -> dict[str, Any]:
    """Write a synthetic run of ``n`` records into ``out``; the writer's own time and size."""
    from llmload.loadtests.run.writer import RunWriter

    info = {"run_id": out.name, "label": "records-bench", "config": {"tokenizer": None}}
    writer = RunWriter(out, info, compression)
    spent = 0.0
    phase = None
    ended = 0.0  # the last response's end: where the synthetic clock's last phase ends
    for record in synthetic_records(n, seed):
        if record.phase != phase:
            if phase is not None:
                writer.on_phase(phase, phase, "end", record.started_at)
            phase = record.phase
            writer.on_phase(phase, phase, "start", record.started_at)
        t = time.perf_counter()
        writer.on_record(record)
        spent += time.perf_counter() - t
        ended = max(ended, record.started_at + (record.e2e_s or 0.0))
    writer.on_phase(phase or "stream", phase or "stream", "end", ended)
    t = time.perf_counter()
    writer.close()
    spent += time.perf_counter() - t
    return {"write_s": spent, "bytes": writer.requests_path.stat().st_size}


def _child(cmd: list[str], timeout: float = 1800) -> tuple[float, int, subprocess.CompletedProcess]:
    """Run ``cmd``; (wall seconds, its peak RSS in bytes, the result)."""
    script = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "wall = time.perf_counter() - t\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024\n"
        "print(json.dumps({'wall': wall, 'rss': rss, 'rc': p.returncode,"
        " 'out': p.stdout[-2000:], 'err': p.stderr[-2000:]}))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", script, *cmd], capture_output=True, text=True, timeout=timeout
    )
    data = json.loads(res.stdout.strip().splitlines()[-1])
    done = subprocess.CompletedProcess(cmd, data["rc"], data["out"], data["err"])
    return data["wall"], data["rss"], done


STEPS = r"""
import json, resource, sys, time
from pathlib import Path
from llmload.reports.build import _write
from llmload.reports.page.html import render_html
from llmload.reports.table.loader import load_run
from llmload.reports.summary.make import build_summary
from llmload.reports.table.vllm_bench import phase_results

out = {}
def step(name, fn):
    t = time.perf_counter()
    value = fn()
    out[name] = {"s": time.perf_counter() - t,
                 "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    return value

run = step("load", lambda: load_run(sys.argv[1]))
summary = step("summary", lambda: build_summary(run))
html = step("html", lambda: render_html(run, summary))
step("vllm", lambda: phase_results(run.measured, run.meta, summary))
out["html_bytes"] = len(html.encode())
print(json.dumps(out))
"""


def measure(run_dir: Path) -> dict[str, Any]:
    """Every step's time and memory for one run directory."""
    cli = [sys.executable, "-m", "llmload"]
    result: dict[str, Any] = {}
    wall, rss, p = _child([*cli, "report", "build", str(run_dir)])
    if p.returncode != 0:
        raise RuntimeError(f"report build failed: {p.stderr}")
    result["build"] = {"s": wall, "rss": rss}
    result["html_bytes"] = (run_dir / "report.html").stat().st_size
    wall, rss, p = _child([sys.executable, "-c", STEPS, str(run_dir)])
    if p.returncode != 0:
        raise RuntimeError(f"steps failed: {p.stderr}")
    result["steps"] = json.loads(p.stdout.strip().splitlines()[-1])
    baseline = run_dir / "baseline.json"
    wall, rss, p = _child([*cli, "report", "baseline", str(run_dir), "--out", str(baseline)])
    result["baseline"] = {"s": wall, "rss": rss, "rc": p.returncode}
    wall, rss, p = _child(
        [*cli, "report", "gate", str(run_dir), "--baseline", str(baseline)]
        + ["--metric", GATE_METRICS]
    )
    result["gate"] = {"s": wall, "rss": rss, "rc": p.returncode}
    # the gate across runs: a history of HISTORY_RUNS copies of that baseline (the run-level
    # path: every check's statistic of each history run and of the run, the t interval)
    history = run_dir / "history"
    history.mkdir(exist_ok=True)
    for i in range(HISTORY_RUNS):
        shutil.copyfile(baseline, history / f"run-{i}.json")
    wall, rss, p = _child(
        [*cli, "report", "gate", str(run_dir), "--history", str(history)]
        + ["--metric", GATE_METRICS]
    )
    result["gate_history"] = {"s": wall, "rss": rss, "rc": p.returncode}
    # the run as Parquet tables (requests, content events, scrapes): issue 37's goal
    export = run_dir / "export"
    wall, rss, p = _child([*cli, "report", "export", str(run_dir), "--out", str(export)])
    size = sum(f.stat().st_size for f in export.glob("*")) if export.is_dir() else 0
    result["export"] = {"s": wall, "rss": rss, "rc": p.returncode, "bytes": size}
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser:
        page = (run_dir / "report.html").resolve().as_uri()
        wall, rss, p = _child(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page], 300
        )
        result["chromium"] = {"s": wall, "rc": p.returncode, "dom_bytes": len(p.stdout)}
    return result


def _export(x: dict[str, Any] | None) -> str:
    if not x:
        return "–"
    if x["rc"] != 0:
        return f"exit {x['rc']}"
    return f"{x['s']:.1f} s ({_mib(x['rss'])}, {_mib(x['bytes'])})"


def _gate(g: dict[str, Any] | None) -> str:
    return f"{g['s']:.1f} s ({_mib(g['rss'])}, exit {g['rc']})" if g else "–"


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def section(n: int, rows: list[dict[str, Any]], load_before: str, load_after: str) -> str:
    lines = [
        "## An hour of records: write, load, summary, report, gate (`records`)",
        "",
        f"`python -m bench records` — {machine()}. Load average at start: {load_before}; "
        f"at the end: {load_after}.",
        "",
        f"A synthetic run of {n:,} records shaped like `make loadtest`'s (sync and stream "
        "phases, the `mix` scenarios: 64/256/128 tokens 5:3:2, one ITL gap per token, 1 % "
        "errors), written by the run writer, then read by `llmload report build` (the "
        "whole command, in its own process), its steps one by one (load = stream the file "
        "into columns; summary = every distribution, exact; html = charts and page; vLLM = "
        f"`vllm_bench_<phase>.json`), `report baseline` and `report gate --metric "
        f"{GATE_METRICS}` against that baseline (its exit code after the time), and against a "
        f"history of {HISTORY_RUNS} copies of it (`--history`, the gate across runs), and "
        "`report export` (Parquet: requests, one row per content event, scrapes). Peak RSS is "
        "the process's own (`ru_maxrss`); a step's is the peak up to its end.",
        "",
        "| compression | file | write | `report build` | peak RSS | load | summary | html "
        "| vLLM JSON | report.html | baseline (RSS) | gate (RSS, exit) | gate --history (RSS, "
        "exit) | export Parquet (RSS, size) | Chromium opens it |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        m, st = r["measure"], r["measure"]["steps"]
        chrome = m.get("chromium")
        opened = f"{chrome['s']:.1f} s" if chrome and chrome["rc"] == 0 else "–"
        lines.append(
            f"| {r['compression']} | {_mib(r['bytes'])} | {r['write_s']:.1f} s "
            f"| {m['build']['s']:.1f} s | {_mib(m['build']['rss'])} "
            f"| {st['load']['s']:.1f} s ({_mib(st['load']['rss'])}) "
            f"| {st['summary']['s']:.1f} s ({_mib(st['summary']['rss'])}) "
            f"| {st['html']['s']:.1f} s ({_mib(st['html']['rss'])}) "
            f"| {st['vllm']['s']:.1f} s | {m['html_bytes'] / 1000:,.0f} kB "
            f"| {m['baseline']['s']:.1f} s ({_mib(m['baseline']['rss'])}) "
            f"| {m['gate']['s']:.1f} s ({_mib(m['gate']['rss'])}, exit {m['gate']['rc']}) "
            f"| {_gate(m.get('gate_history'))} | {_export(m.get('export'))} | {opened} |"
        )
    best = min(rows, key=lambda r: r["measure"]["build"]["s"])
    b = best["measure"]["build"]
    met = b["s"] <= GOAL_S and b["rss"] <= GOAL_RSS
    html_ok = all(r["measure"]["html_bytes"] <= GOAL_HTML for r in rows)
    lines += [
        "",
        f"Goals at {n:,} records (`report build` ≤ {GOAL_S:.0f} s and ≤ 2 GiB RSS, "
        f"report.html ≤ 5 MB): **{'met' if met and html_ok else 'not met'}** here "
        f"({b['s']:.0f} s, {_mib(b['rss'])} at best, {best['compression']}).",
    ]
    gates = [
        (way, g["s"])
        for r in rows
        for way, g in (
            ("baseline", r["measure"]["gate"]),
            ("history", r["measure"].get("gate_history")),
        )
        if g
    ]
    if gates:
        worst = max(s for _, s in gates)
        lines += [
            "",
            f"The gate's goal at {n:,} records (≤ {GOAL_S:.0f} s, against a baseline or a "
            f"history): **{'met' if worst <= GOAL_S else 'not met'}** here (slowest "
            f"{worst:.0f} s).",
        ]
    exports = [r["measure"]["export"] for r in rows if r["measure"].get("export")]
    if exports:
        worst_x = max(exports, key=lambda x: x["s"])
        ok = all(x["rc"] == 0 and x["s"] <= GOAL_S and x["rss"] <= GOAL_RSS for x in exports)
        lines += [
            "",
            f"The export's goal at {n:,} records (`report export`, Parquet, ≤ {GOAL_S:.0f} s "
            f"and ≤ 2 GiB RSS): **{'met' if ok else 'not met'}** here (slowest "
            f"{worst_x['s']:.0f} s, {_mib(worst_x['rss'])}).",
        ]
    if not (met and html_ok):
        lines += ["", limits(n, best)]
    return "\n".join(lines)


def limits(n: int, best: dict[str, Any]) -> str:
    """What held the fastest `report build` back, from its own steps, and the next step."""
    st = best["measure"]["steps"]
    b = best["measure"]["build"]
    steps = {k: st[k]["s"] for k in ("load", "summary", "html", "vllm")}
    slowest = max(steps, key=lambda k: steps[k])
    total = sum(steps.values())
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in steps.items())
    text = (
        f"What limits it ({best['compression']}, its steps one by one: {parts} of {total:.1f} s): "
    )
    if b["rss"] > GOAL_RSS:
        return text + (
            f"memory — the peak ({_mib(b['rss'])}) is the columns plus the copies a step "
            "makes of the largest array (every ITL gap); next step: a step that copies it "
            "less (sorted in place, per phase)."
        )
    if slowest == "load":
        return text + (
            f"reading the file — {steps['load'] / n * 1e6:.0f} µs per record to decode its "
            "JSON line and put it into columns, on one core. Next step: decode the file on "
            "every core (byte ranges, each process its own columns, joined), or let the run "
            "write a columnar copy of its records as it ends."
        )
    return text + (
        f"the {slowest} step, {steps[slowest] / n * 1e6:.0f} µs per record; next step: "
        "profile that step at this size (py-spy) and take its largest cost off the records."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench records", description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--compressions", default="none,zst,gz")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--keep", metavar="DIR", help="write the runs here and keep them")
    args = parser.parse_args(argv)
    current()  # calibrate before loading the machine
    load_before = load_average()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-records-"))
    rows = []
    try:
        for compression in args.compressions.split(","):
            out = base / f"run-{compression}"
            written = write_run(out, args.records, compression)
            print(json.dumps({"compression": compression, **written}), flush=True)
            measured = measure(out)
            print(json.dumps(measured), flush=True)
            rows.append({"compression": compression, **written, "measure": measured})
            if not args.keep:
                shutil.rmtree(out)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    text = section(args.records, rows, load_before, load_average())
    print(text)
    if not args.no_write:
        write_section("records", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
