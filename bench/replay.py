"""``python -m bench replay``: how exactly a trace replay sends each request at its trace time.

Writes a dense Mooncake trace of our own (``dense_trace``: 1,000 requests, Poisson
arrivals at 125/s, so about 8 s of trace; short prompts and answers), replays it at
``--speedup 1`` with ``llmload run --dataset trace`` against the bundled synthetic
server (TTFT 10 ms, ITL 2 ms) and reads ``requests.jsonl``: each request's lateness
is its start (``started_at``, wall clock) minus its trace time, less the smallest
such difference (the replay's own start).  Beside it, what the machine shows:
``sleep_lateness`` — how late a plain ``time.sleep`` of a few milliseconds wakes
up here, measured right after the replay.  Writes the ``replay`` section of
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.mdsection import ROOT, load_average, machine, write_section
from bench.procs import start_server_process
from llmload.loadtests.percentile import percentile_of

SERVER_ARGS = ("--ttft-ms", "10", "--itl-ms", "2")


def dense_trace(path: Path, n: int = 1000, rate: float = 125.0, seed: int = 27) -> Path:
    """A Mooncake JSONL trace: ``n`` Poisson arrivals at ``rate``/s (integer ms), short lengths."""
    rng = random.Random(seed)
    t = 0.0
    with path.open("w", encoding="utf-8") as f:
        for _ in range(n):
            line = {
                "timestamp": round(t * 1000),
                "input_length": rng.randint(16, 64),
                "output_length": rng.randint(2, 6),
            }
            f.write(json.dumps(line) + "\n")
            t += rng.expovariate(rate)
    return path


def trace_times(path: Path) -> list[float]:
    """The trace's request times in seconds, in time order (Mooncake ``timestamp`` ms)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return sorted(json.loads(line)["timestamp"] / 1000.0 for line in lines if line.strip())


def lateness(
    records: list[dict[str, Any]], times: list[float], speedup: float = 1.0
) -> list[float]:
    """Each request's start minus its trace time, less the smallest such difference (seconds).

    Records and trace requests are paired in time order: a request that went out
    late enough to pass the next one is paired with that one's time, a lateness no
    larger than its own.
    """
    starts = sorted(r["started_at"] for r in records)
    if len(starts) != len(times):
        raise ValueError(f"{len(starts)} records for {len(times)} trace requests")
    diffs = [s - t / speedup for s, t in zip(starts, times, strict=True)]
    base = min(diffs)
    return [d - base for d in diffs]


def sleep_lateness(samples: int = 200, nap: float = 0.003) -> list[float]:
    """How late ``time.sleep(nap)`` wakes up on this machine now (seconds, one per sample)."""
    out = []
    for _ in range(samples):
        t = time.perf_counter()
        time.sleep(nap)
        out.append(time.perf_counter() - t - nap)
    return out


def replay(url: str, trace: Path, out: Path, *extra: str, timeout: float = 180) -> Path:
    """``llmload run --dataset trace TRACE --modes stream`` against ``url``; the run directory."""
    cmd = [sys.executable, "-m", "llmload", "run", "--target", url, "--dataset", "trace"]
    cmd += [str(trace), "--modes", "stream", "--users", "16", "--out", str(out), "--no-report"]
    proc = subprocess.run([*cmd, *extra], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return out


def read_records(out: Path) -> list[dict[str, Any]]:
    """The run's ``requests.jsonl``."""
    text = (out / "requests.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def ms(values: list[float], q: float) -> float:
    return (percentile_of(values, q) or 0.0) * 1000.0


#: the issue's goal: every request within 2 ms of its trace time at p99, at --speedup 1
GOAL_P99_MS = 2.0


def verdict(p99s: list[float]) -> str:
    """Whether every replay met the 2 ms p99 goal, in one sentence with the figures."""
    met = sum(p <= GOAL_P99_MS for p in p99s)
    span = f"{min(p99s):.2f}–{max(p99s):.2f} ms" if p99s else "no runs"
    if p99s and met == len(p99s):
        return f"**Goal met:** lateness p99 ≤ {GOAL_P99_MS:g} ms in every replay ({span})."
    return (
        f"**Goal not met in every replay:** lateness p99 ≤ {GOAL_P99_MS:g} ms in {met} of "
        f"{len(p99s)} ({span}); see the event-loop lag and the load average for why."
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench replay", description=__doc__)
    p.add_argument("--runs", type=int, default=3, help="replays of the trace (3)")
    p.add_argument("--no-write", action="store_true", help="print, do not touch BENCHMARKS.md")
    args = p.parse_args(argv)
    load_start = load_average()
    rows: list[str] = []
    p99s: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        trace = dense_trace(Path(tmp) / "dense.jsonl")
        times = trace_times(trace)
        with start_server_process(*SERVER_ARGS) as server:
            for i in range(args.runs):
                out = replay(server.url, trace, Path(tmp) / f"run{i}")
                records = read_records(out)
                late = lateness(records, times)
                health = json.loads((out / "run.json").read_text())["phases"][0]["health"]
                lag = health["processes"]["local"]
                delay = [r["schedule_delay_s"] for r in records]
                ref = sleep_lateness()
                ok = sum(r["status"] == "ok" for r in records)
                p99s.append(ms(late, 99))
                rows.append(
                    f"| {i + 1} | {len(records)} ({ok} ok) | {ms(late, 50):.2f} | "
                    f"{ms(late, 99):.2f} | {max(late) * 1000:.2f} | {ms(delay, 99):.2f} | "
                    f"{lag['lag_p99_ms']:.1f} / {lag['lag_max_ms']:.1f} | "
                    f"{ms(ref, 50):.2f} / {ms(ref, 99):.2f} |"
                )
                print(rows[-1], flush=True)
    body = "\n".join(
        [
            "## Trace replay: each request at its trace time (`replay`)",
            "",
            "`python -m bench replay`: a 1,000-request Mooncake trace of our own "
            "(`bench.replay.dense_trace`: Poisson arrivals at 125/s, ~8 s, prompts of "
            "16–64 tokens, 2–6 tokens out), replayed at `--speedup 1` by `llmload run "
            "--dataset trace FILE --modes stream --users 16` against the bundled synthetic "
            f"server (`{' '.join(SERVER_ARGS)}`). Lateness: a request's `started_at` minus "
            "its trace time, less the smallest such difference (from `requests.jsonl`); "
            "schedule delay: the records' own `schedule_delay_s`; the machine: how late a "
            "3 ms `time.sleep` woke up right after each replay (200 samples).",
            "",
            "| run | records | lateness p50 ms | p99 ms | max ms | schedule delay p99 ms "
            "| event-loop lag p99 / max ms (run.json) | machine: sleep late p50 / p99 ms |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            verdict(p99s),
            "",
            "How to read it: a send's last 1.5 ms is spent yielding rather than on epoll's "
            "millisecond-coarse timer (which wakes up to a millisecond late); a "
            "request's body is built before that wait; requests due within the same "
            "millisecond go out one after another from one event loop; and while the "
            "process is held off a busy CPU (the event-loop lag column) every request due "
            "meanwhile goes late — on a shared machine that, not the replay, is the tail. "
            "The server-metrics scraper's light scrape once held the loop milliseconds a "
            "second (its line-by-line choice over ~1,000 bucket lines, seen by tracing "
            "greenlet switches); it now drops bucket lines in one regular-expression pass.",
            "",
            f"Load average at start {load_start}, at end {load_average()}. {machine()}.",
        ]
    )
    print(body)
    if not args.no_write:
        write_section("replay", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
