"""``llmload run`` against the real bundled synthetic server (subprocesses, loopback).

Timing bounds are generous: the machine is small and shared.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from llmload.reports.build import build_run
from tests.fixtures.loadtests import (
    ROOT,
    harness_slack,
    loadtests_cmd,
    median,
    run_cli,
    server_requests,
)

SYNTH = ("--ttft-ms", "200", "--itl-ms", "20")


def test_sync_then_stream_is_exact(start_server_proc, tmp_path: Path) -> None:
    server = start_server_proc(*SYNTH)
    run = run_cli(
        tmp_path / "run",
        *("--target", server.url, "--users", "20", "--spawn-rate", "100", "--pacing", "2s"),
        *("--duration", "3s", "--max-tokens", "32", "--ignore-eos", "--seed", "7"),
    )
    assert run.rc == 0, run.stderr
    records = run.records
    info = run.run_json
    assert [p["name"] for p in info["phases"]] == ["sync", "stream"]
    assert all(p["started_at"] < p["ended_at"] for p in info["phases"])
    assert info["status"] == "completed" and info["records"] == len(records)
    assert info["schema"] == 1 and info["config"]["seed"] == 7 and info["model"]
    assert {"llmload", "python", "locust", "httpx"} <= set(info["versions"])
    # the client sampled itself in each phase (no exporter asked for)
    assert all(p["health"]["processes"]["local"]["samples"] >= 1 for p in info["phases"])
    # ... and its host's CPU steal, which the trust box names (0 on bare metal)
    assert all(0.0 <= p["health"]["steal_pct"] <= 100.0 for p in info["phases"])
    trust = build_run(tmp_path / "run").trust
    assert trust is not None and "machine (CPU steal)" in {i["check"] for i in trust["items"]}
    # every issued request is one record, and the server counted each once
    assert len({r["request_id"] for r in records}) == len(records)
    assert server_requests(server.url) == len(records)
    assert all(r["status"] == "ok" for r in records), Counter(r["error"] for r in records)

    stream = [r for r in records if r["phase"] == "stream"]
    sync = [r for r in records if r["phase"] == "sync"]
    assert len(stream) >= 20 and len(sync) >= 20
    # streaming TTFT: the client's clock agrees with the server's own within a few ms, plus
    # what the harness itself recorded as its own delay (a busy neighbour holds the client off
    # the CPU; the bound is then wider, and the run's health block says why)
    slack = harness_slack(info, "stream")
    assert abs(median([r["ttft_s"] - r["server_ttft_s"] for r in stream])) < 0.015 + slack
    assert median([r["server_ttft_s"] for r in stream]) > 0.195  # the server keeps its TTFT
    assert all(r["output_tokens"] == 32 and r["token_source"] == "usage" for r in stream)
    # decode: the client's TPOT is the server's (its own first-to-last token time), which is
    # at least the configured 20 ms per token
    server_tpot = [(r["server_e2e_s"] - r["server_ttft_s"]) / 31 for r in stream]
    assert median(server_tpot) > 0.0195
    assert abs(median([r["tpot_s"] for r in stream]) - median(server_tpot)) < 0.003 + slack / 31
    assert all(len(r["itl_s"]) >= 1 for r in stream)
    # sync: nothing is seen until the body, so TTFT is the whole response
    sync_slack = harness_slack(info, "sync")
    assert all(abs(r["ttft_s"] - r["e2e_s"]) < 0.005 + sync_slack for r in sync)
    assert median([r["e2e_s"] for r in sync]) > 0.2 + 31 * 0.02 * 0.9

    # identical prompts in both phases: user i starts with the same seeded prompt
    def first_scenario(rs: list[dict]) -> dict[int, str]:
        out: dict[int, str] = {}
        for r in sorted(rs, key=lambda r: r["started_at"]):
            out.setdefault(r["user_id"], r["scenario"])
        return out

    assert first_scenario(sync) == first_scenario(stream)
    assert len(first_scenario(sync)) == 20


def test_workers_lose_nothing(start_server_proc, tmp_path: Path) -> None:
    server = start_server_proc("--ttft-ms", "50", "--itl-ms", "5")
    run = run_cli(
        tmp_path / "dist",
        *("--target", server.url, "--users", "8", "--pacing", "0.5s", "--duration", "3s"),
        *("--max-tokens", "16", "--workers", "2", "--modes", "stream"),
    )
    assert run.rc == 0, run.stderr
    records = run.records
    assert len(records) > 16
    assert len({r["request_id"] for r in records}) == len(records)
    assert server_requests(run_server := server.url) == len(records), run_server
    assert {r["worker"] for r in records} == {"worker-0", "worker-1"}
    assert sorted({r["user_id"] for r in records}) == list(range(8))
    # harness health per process, sampled without the exporter: each worker and the master
    procs = run.run_json["phases"][0]["health"]["processes"]
    assert set(procs) == {"master", "worker-0", "worker-1"}
    assert all(p["samples"] >= 2 and p["cpu_max"] >= 0 for p in procs.values()), procs


def test_open_loop_records_schedule_delay(start_server_proc, tmp_path: Path) -> None:
    server = start_server_proc("--ttft-ms", "20", "--itl-ms", "5")
    run = run_cli(
        tmp_path / "open",
        *("--target", server.url, "--rate", "10", "--arrival", "constant", "--users", "10"),
        *("--duration", "3s", "--max-tokens", "8", "--modes", "stream"),
    )
    assert run.rc == 0, run.stderr
    records = run.records
    assert 27 <= len(records) <= 30
    delays = [r["schedule_delay_s"] for r in records]
    assert all(d is not None and d >= 0 for d in delays)
    assert median(delays) < 0.05 + harness_slack(run.run_json, "stream")  # + the client's own lag
    starts = sorted(r["started_at"] for r in records)
    assert abs((starts[-1] - starts[0]) / (len(starts) - 1) - 0.1) < 0.02


def test_open_loop_warns_when_rate_is_not_kept(start_server_proc, tmp_path: Path) -> None:
    server = start_server_proc("--ttft-ms", "300", "--itl-ms", "5")
    run = run_cli(
        tmp_path / "late",
        *("--target", server.url, "--rate", "20", "--users", "2", "--duration", "2s"),
        *("--max-tokens", "4", "--modes", "stream"),
    )
    assert run.rc == 0, run.stderr
    assert "not achieved" in run.stderr
    assert "raise --users, the open-loop concurrency cap" in run.stderr  # both users busy
    assert max(r["schedule_delay_s"] for r in run.records) > 0.2


def test_unreachable_target_exits_2_fast(tmp_path: Path) -> None:
    began = time.monotonic()
    run = run_cli(tmp_path / "none", "--target", "http://127.0.0.1:9", "--duration", "2s")
    assert run.rc == 2
    assert time.monotonic() - began < 10
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot reach target" in lines[0]
    assert not (tmp_path / "none").exists()


def test_faults_get_one_record_each_with_its_class(start_server_proc, tmp_path: Path) -> None:
    server = start_server_proc(
        *("--ttft-ms", "20", "--itl-ms", "10", "--fail-rate", "0.2", "--disconnect-rate", "0.2"),
        *("--stall-rate", "0.2", "--stall-s", "3", "--malformed-rate", "0.15", "--seed", "3"),
    )
    run = run_cli(
        tmp_path / "faults",
        *("--target", server.url, "--users", "10", "--pacing", "0.2s", "--duration", "3s"),
        *("--max-tokens", "16", "--modes", "stream", "--stall-timeout", "1s"),
    )
    assert run.rc == 0, run.stderr
    records = run.records
    classes = Counter(r["status"] for r in records)
    assert {"ok", "http_5xx", "disconnect", "stall", "protocol"} <= set(classes), classes
    assert len({r["request_id"] for r in records}) == len(records)
    deadline = time.monotonic() + 8  # the server notices a stalled client left at its next write
    while server_requests(server.url) < len(records) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert server_requests(server.url) == len(records)
    for r in records:
        assert (r["status"] == "ok") == (r["error"] is None)
        if r["status"] == "stall":
            assert "no bytes for 1s" in r["error"] and r["e2e_s"] is None


def test_ctrl_c_still_writes_the_files(start_server_proc, tmp_path: Path) -> None:
    server = start_server_proc("--ttft-ms", "100", "--itl-ms", "50")
    out = tmp_path / "int"
    args = ("--target", server.url, "--users", "5", "--pacing", "0s", "--duration", "60s")
    proc = subprocess.Popen(
        loadtests_cmd("run", "--out", str(out), "--no-report", *args, "--max-tokens", "64"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    jsonl = out / "requests.jsonl"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not jsonl.exists() or jsonl.stat().st_size == 0):
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    info = json.loads((out / "run.json").read_text())
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert info["status"] == "interrupted" and info["records"] == len(records) > 0
    cancelled = [r for r in records if r["error"] == "cancelled by the client: run stopped"]
    assert cancelled and all(r["status"] == "disconnect" for r in cancelled)
    assert info["phases"][0]["ended_at"] is not None


def test_plan_key_headers_warmup_and_turns(start_server_proc, tmp_path: Path) -> None:
    secret = "sk-test-0123456789"
    server = start_server_proc("--ttft-ms", "20", "--itl-ms", "5", env={"LLMLOAD_API_KEY": secret})
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'target = "{server.url}/v1"\nusers = 3\npacing = "0.3s"\nduration = "2s"\n'
        'modes = "stream"\nmax-tokens = 8\nturns = 2\nwarmup = "1s"\n'
        'header = ["X-Team: infra", "X-Api-Key: also-secret"]\n',
        encoding="utf-8",
    )
    run = run_cli(
        tmp_path / "plan",
        *("--plan", str(plan), "--api-key-env", "MY_KEY", "--users", "2"),
        env={"MY_KEY": secret},
    )
    assert run.rc == 0, run.stderr
    records = run.records
    assert all(r["status"] == "ok" for r in records), Counter(r["error"] for r in records)
    info = run.run_json
    assert info["config"]["users"] == 2 and info["config"]["pacing"] == 0.3
    assert [p["name"] for p in info["phases"]] == ["warmup", "stream"]
    warm = [r for r in records if r["phase"] == "warmup"]
    assert warm and all(r["warmup"] for r in warm)
    assert not any(r["warmup"] for r in records if r["phase"] == "stream")
    assert {0, 1} <= {r["turn"] for r in records if r["phase"] == "stream"}
    for text in (run.stdout, run.stderr, (run.out / "run.json").read_text()):
        assert secret not in text and "also-secret" not in text
    assert secret not in (run.out / "requests.jsonl").read_text()
    # without the key the server refuses every request: http_4xx, still one record each
    denied = run_cli(
        tmp_path / "denied",
        *("--target", server.url, "--users", "2", "--pacing", "0.2s", "--duration", "1s"),
        *("--modes", "stream", "--max-tokens", "4"),
    )
    # ... and the run says so in its exit code (3: every measured request failed)
    assert denied.rc == 3, denied.stderr
    assert "every measured request failed" in denied.stderr
    assert {r["status"] for r in denied.records} == {"http_4xx"}
    assert all(r["http_status"] == 401 for r in denied.records)


def test_steps_shape_and_the_web_ui(start_server_proc, tmp_path: Path) -> None:
    import socket

    import httpx

    server = start_server_proc("--ttft-ms", "20", "--itl-ms", "5")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "steps"
    args = ("--target", server.url, "--shape", "steps:start=1,step=2,every=1s", "--users", "9")
    args += ("--pacing", "0.2s", "--duration", "3s", "--modes", "stream", "--max-tokens", "4")
    proc = subprocess.Popen(
        loadtests_cmd(
            "run", "--out", str(out), "--no-report", *args, "--web", "--web-port", str(port)
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    names: set[str] = set()
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline and not names:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            stats = httpx.get(f"http://127.0.0.1:{port}/stats/requests", timeout=2).json()
            names = {e["name"] for e in stats["stats"] if e["name"] != "Aggregated"}
        time.sleep(0.3)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    # one entry per scenario: one request is one count in locust's table
    assert names and names <= {"short_qa", "code_gen", "long_summary"}, names
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    first = min(r["started_at"] for r in records)
    early = {r["user_id"] for r in records if r["started_at"] - first < 0.8}
    assert early == {0}
    assert {r["user_id"] for r in records} == set(range(5))
    assert (out / "locust_stream.csv").exists()


def test_request_timeout_is_one_timeout_record(start_server_proc, tmp_path: Path) -> None:
    server = start_server_proc("--ttft-ms", "2000", "--itl-ms", "5")
    began = time.monotonic()
    run = run_cli(
        tmp_path / "slow",
        *("--target", server.url, "--users", "2", "--pacing", "0.2s", "--duration", "1s"),
        *("--modes", "sync", "--max-tokens", "4", "--request-timeout", "0.5s"),
    )
    assert run.rc == 3, run.stderr  # every measured request timed out
    assert time.monotonic() - began < 30
    records = run.records
    assert records and {r["status"] for r in records} == {"timeout"}
    assert all(r["error"] == "no complete response within 0.5s" for r in records)
    assert all(r["e2e_s"] is None and r["ttft_s"] is None for r in records)
