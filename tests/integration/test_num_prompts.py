"""``--num-prompts N``: exactly N requests per measured phase, closed loop, open loop, workers."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from tests.fixtures.loadtests import run_cli, server_requests


def test_num_prompts_is_exact_everywhere(start_server_proc, tmp_path: Path) -> None:
    server = start_server_proc("--ttft-ms", "30", "--itl-ms", "3")
    common = ("--target", server.url, "--max-tokens", "8", "--seed", "3")
    runs = {
        # vLLM's words: 4 back-to-back streams, 23 prompts, both modes
        "closed": (23, ("--max-concurrency", "4", "--num-prompts", "23")),
        # open loop: 17 arrivals at 40/s, whatever the rate would hold in a minute
        "open": (17, ("--request-rate", "40", "--users", "8", "--num-prompts", "17")),
        # two locust workers share the budget (12 + 11)
        "workers": (
            23,
            ("--users", "6", "--pacing", "0s", "--num-prompts", "23", "--workers", "2"),
        ),
    }
    total = 0
    for name, (n, args) in runs.items():
        modes = ("--modes", "sync,stream") if name == "closed" else ("--modes", "stream")
        run = run_cli(tmp_path / name, *common, *modes, *args)
        assert run.rc == 0, (name, run.stderr)
        by_phase = Counter(r["phase"] for r in run.records)
        expected = {"sync": n, "stream": n} if name == "closed" else {"stream": n}
        assert by_phase == expected, (name, by_phase)
        assert all(r["status"] == "ok" for r in run.records), name
        assert run.run_json["config"]["num_prompts"] == n
        assert run.run_json["config"]["duration"] is None  # no time limit was asked for
        total += len(run.records)
        if name == "workers":
            assert {r["worker"] for r in run.records} == {"worker-0", "worker-1"}
        if name == "open":
            # the arrivals are the seeded schedule's first 17: none dropped, none extra
            assert all(r["schedule_delay_s"] is not None for r in run.records)
    assert server_requests(server.url) == total


def test_duration_still_bounds_a_num_prompts_phase(start_server_proc, tmp_path: Path) -> None:
    server = start_server_proc("--ttft-ms", "30", "--itl-ms", "3")
    run = run_cli(
        tmp_path / "capped",
        *("--target", server.url, "--max-tokens", "8", "--modes", "stream"),
        *("--users", "2", "--pacing", "0.5s", "--num-prompts", "1000", "--duration", "2s"),
    )
    assert run.rc == 0, run.stderr
    n = len(run.records)
    assert 2 <= n < 1000 and math.isclose(run.run_json["config"]["duration"], 2.0)


def test_random_dataset_gets_exact_output_lengths(start_server_proc, tmp_path: Path) -> None:
    """``min_tokens`` = ``max_tokens``: the server's usage says exactly --output-len, every time."""
    server = start_server_proc("--ttft-ms", "20", "--itl-ms", "2")
    run = run_cli(
        tmp_path / "random",
        *("--target", server.url, "--dataset", "random", "--input-len", "48"),
        *("--output-len", "12", "--max-concurrency", "3", "--num-prompts", "9"),
        *("--protocol", "openai-completions", "--modes", "stream"),
    )
    assert run.rc == 0, run.stderr
    assert len(run.records) == 9
    assert all(r["output_tokens"] == 12 and r["token_source"] == "usage" for r in run.records)
    assert {r["scenario"] for r in run.records} == {"random"}
    pool = run.run_json["workload"]["pools"]["random"]
    assert pool["generator"]["input_len"] == 48 and pool["generator"]["output_len"] == 12
