"""``llmload run --dataset trace FILE`` over real HTTP: each request at its trace time, with its
lengths, in every format, across workers; a bad line stops the run before any load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.replay import dense_trace, lateness, trace_times
from llmload.loadtests.percentile import percentile_of
from llmload.loadtests.workload.traces import read_trace
from tests.fixtures.loadtests import CliRun, harness_slack, run_cli, server_requests

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


@pytest.fixture(scope="module")
def server():
    from bench.procs import start_server_process

    with start_server_process("--ttft-ms", "10", "--itl-ms", "2") as proc:
        yield proc


def replay(out: Path, server, trace: Path, *args: str) -> CliRun:
    """``llmload run --target SERVER --dataset trace TRACE --modes stream ARGS``, exit 0."""
    cmd = ("--target", server.url, "--dataset", "trace", str(trace), "--modes", "stream")
    run = run_cli(out, *cmd, *args, timeout=120)
    assert run.rc == 0, run.stderr[-2000:]
    return run


def intended_offsets(records: list[dict]) -> list[float]:
    """Each request's intended send time (its start less its schedule delay), from the first."""
    intended = sorted(r["started_at"] - r["schedule_delay_s"] for r in records)
    return [t - intended[0] for t in intended]


def test_a_1000_request_replay_starts_each_request_at_its_trace_time(server, tmp_path):
    trace = dense_trace(tmp_path / "dense.jsonl")  # 1,000 Poisson arrivals at 125/s
    times = trace_times(trace)
    run = replay(tmp_path / "run", server, trace, "--users", "16")
    records = run.records
    assert len(records) == 1000 and all(r["status"] == "ok" for r in records)
    assert {r["scenario"] for r in records} == {"trace"}
    # the schedule is the trace: intended send times are its times, to the microsecond
    assert intended_offsets(records) == pytest.approx(times, abs=2e-4)
    # lengths honoured: every request asked for, and got, its trace's output length
    wanted = sorted(json.loads(ln)["output_length"] for ln in trace.read_text().splitlines())
    assert sorted(r["usage_output_tokens"] for r in records) == wanted
    late = lateness(records, times)  # wall-clock start minus trace time, from requests.jsonl
    p99 = percentile_of(late, 99) or 0.0
    # 2 ms p99 on a quiet machine; a busy one adds what it held the load generator off the
    # CPU in this very phase (run.json's worst event-loop lag)
    slack = harness_slack(run.run_json, "stream")
    print(f"replay lateness p50 {percentile_of(late, 50) * 1000:.2f} ms p99 {p99 * 1000:.2f} ms")
    assert p99 <= 0.002 + slack, f"p99 {p99 * 1000:.2f} ms, machine slack {slack * 1000:.1f} ms"
    assert run.run_json["config"]["duration"] is None  # the phase ended with the trace


@pytest.mark.parametrize("name", ["mooncake.jsonl", "burstgpt.csv", "azure.csv"])
def test_each_trace_format_replays_through_llmload_run(server, tmp_path, name):
    trace = read_trace(TRACES / name)
    records = replay(tmp_path / "run", server, TRACES / name, "--speedup", "2").records
    assert len(records) == len(trace.requests) and all(r["status"] == "ok" for r in records)
    assert intended_offsets(records) == pytest.approx(
        [r.at_s / 2 for r in trace.requests], abs=2e-4
    )
    assert sorted(r["usage_output_tokens"] for r in records) == sorted(
        r.output_len for r in trace.requests
    )
    info = CliRun(0, "", "", tmp_path / "run").run_json["workload"]["trace"]
    assert info["format"] == trace.format and info["replayed"] == len(trace.requests)
    assert info["skipped"] == trace.skipped


def test_a_window_of_the_trace_across_two_workers(server, tmp_path):
    trace = read_trace(TRACES / "mooncake.jsonl")
    inside = [r for r in trace.requests if 0.5 <= r.at_s < 1.6]
    window = ("--trace-window", "0.5:1.6", "--workers", "2", "--users", "4")
    records = replay(tmp_path / "run", server, TRACES / "mooncake.jsonl", *window).records
    assert len(records) == len(inside) and len({r["request_id"] for r in records}) == len(inside)
    assert {r["worker"] for r in records} == {"worker-0", "worker-1"}
    # each worker keeps its own clock: the offsets within one worker are the trace's
    for worker in ("worker-0", "worker-1"):
        mine = [r for r in records if r["worker"] == worker]
        k = 0 if worker == "worker-0" else 1
        want = [inside[i].at_s for i in range(k, len(inside), 2)]
        assert intended_offsets(mine) == pytest.approx([t - want[0] for t in want], abs=2e-4)


def test_a_bad_trace_line_stops_the_run_before_any_load(server, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("Timestamp,Model,Request tokens,Response tokens\n0.5,x,12,4\n0.9,x,12,-4\n")
    before = server_requests(server.url)
    run = run_cli(tmp_path / "run", "--target", server.url, "--dataset", "trace", str(bad))
    assert run.rc == 2
    assert f"{bad}:3: Response tokens must be >= 0" in run.stderr
    assert "Traceback" not in run.stderr
    assert server_requests(server.url) == before and not (tmp_path / "run").exists()
