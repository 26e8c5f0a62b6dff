"""``llmload run --dataset agent`` against the bundled server: sessions of tool calls whose
per-step TTFT grows with the history as the per-token prefill says; closed and open loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.loadtests.percentile import percentile_of
from tests.fixtures.drive import loadtest
from tests.fixtures.loadtests import CliRun

#: the engine: TTFT = 60 ms + 1 ms per prompt token (no prefix cache)
TTFT_MS, PREFILL_MS = 60.0, 1.0
STEPS, THINK_S = 4, 0.05
AGENT = (
    "--dataset", "agent", "--scenario", "short_qa", "--agent-steps", str(STEPS),
    "--tool-result-tokens", "120", "--think-time", f"{THINK_S}s", "--max-tokens", "8",
    "--modes", "stream",
)  # fmt: skip


@pytest.fixture(scope="module")
def server():
    from bench.procs import start_server_process

    args = ("--ttft-ms", str(TTFT_MS), "--prefill-ms-per-token", str(PREFILL_MS), "--itl-ms", "2")
    with start_server_process(*args) as proc:
        yield proc


def sessions_of(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r["session_id"], []).append(r)
    return {k: sorted(v, key=lambda r: r["step"]) for k, v in out.items()}


def median(values: list[float]) -> float:
    m = percentile_of(values, 50)
    assert m is not None
    return m


def test_each_steps_ttft_grows_with_its_history_as_the_prefill_says(server, tmp_path: Path):
    out = tmp_path / "closed"
    summary = loadtest(
        out, "--target", server.url, *AGENT, "--users", "3", "--pacing", "0", "--duration", "6s"
    )
    records = CliRun(0, "", "", out).records
    assert records and all(r["status"] == "ok" for r in records)
    assert all(r["ttft_s"] is not None for r in records)  # a tool call's first token is timed
    sessions = sessions_of(records)
    complete = [s for s in sessions.values() if len(s) == STEPS]
    assert len(complete) >= 3
    for steps in complete:
        assert [r["step"] for r in steps] == list(range(STEPS))
        assert [r["finish_reason"] for r in steps[:-1]] == ["tool_calls"] * (STEPS - 1)
        assert steps[-1]["finish_reason"] in ("stop", "length")  # tool_choice none: the answer
        tokens = [r["prompt_tokens"] for r in steps]
        assert tokens == sorted(tokens) and len(set(tokens)) == STEPS  # the history grows
        # each step after an answer waited the think time before it was sent
        for a, b in zip(steps, steps[1:], strict=False):
            assert b["started_at"] - (a["started_at"] + a["e2e_s"]) >= THINK_S - 0.002
    # per step, the median TTFT is the engine's 60 ms + 1 ms per prompt token, and it grows
    # from step to step by what the added history costs at 1 ms a token (within 5 %); a step 0
    # right after the last session's answer finds the server still finishing that one (~2 ms)
    by_step = {k: [r for r in records if r["step"] == k] for k in range(STEPS)}
    predicted, measured = {}, {}
    for k, recs in by_step.items():
        predicted[k] = median([TTFT_MS + PREFILL_MS * r["prompt_tokens"] for r in recs])
        measured[k] = median([r["ttft_s"] * 1000 for r in recs])
        print(f"step {k}: TTFT p50 {measured[k]:.1f} ms, prefill says {predicted[k]:.1f} ms")
        assert abs(measured[k] - predicted[k]) <= 0.1 * predicted[k]
    for k in range(1, STEPS):
        grew, should = measured[k] - measured[k - 1], predicted[k] - predicted[k - 1]
        assert should > 60 * PREFILL_MS  # each step's history adds over 60 tokens
        assert abs(grew - should) <= 0.05 * should, (k, grew, should)
    block = summary["phases"]["stream"]["agent"]
    assert block["sessions"] == len(sessions) and block["complete"] == len(complete)
    assert block["steps_per_session_mean"] == STEPS
    assert [int(k) for k in block["steps"]] == list(range(STEPS))
    spans = [s[-1]["started_at"] + s[-1]["e2e_s"] - s[0]["started_at"] for s in complete]
    assert block["session_ms"]["p50"] == pytest.approx(median(spans) * 1000)
    assert min(spans) >= (STEPS - 1) * THINK_S
    html = (out / "report.html").read_text(encoding="utf-8")
    assert 'id="agent-sessions"' in html and "Agent sessions" in html


def test_open_loop_is_sessions_per_second_across_two_workers(server, tmp_path: Path):
    out = tmp_path / "open"
    summary = loadtest(
        out,
        "--target",
        server.url,
        *AGENT,
        "--rate",
        "4",
        "--arrival",
        "constant",
        "--users",
        "8",
        "--duration",
        "3s",
        "--workers",
        "2",
        timeout=180,
    )
    records = CliRun(0, "", "", out).records
    sessions = sessions_of(records)
    # 4 sessions a second for 3 s: each arrival is one session, its steps follow its answers
    assert 11 <= len(sessions) <= 12
    assert {r["worker"] for r in records} == {"worker-0", "worker-1"}
    for steps in sessions.values():
        assert steps[0]["schedule_delay_s"] is not None  # the session's start was scheduled
        assert all(r["schedule_delay_s"] is None for r in steps[1:])
    block = summary["phases"]["stream"]["agent"]
    assert block["complete"] >= 8 and "session_from_intended_ms" in block
    run = json.loads((out / "run.json").read_text())
    assert run["workload"]["agent"]["steps"] == STEPS
