"""Harness health per phase: run.json's health block, the trust box, and the gate's refusal."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llmload.loadtests.run.healthlog import CPU_LINE_PCT, LAG_LINE_S, HealthLog, phase_health
from llmload.loadtests.run.phaseloop import late_hint
from llmload.loadtests.run.sinks import HarnessHealth
from llmload.loadtests.run.status import StatusLine
from llmload.loadtests.run.writer import RunWriter
from llmload.reports.build import build_run
from llmload.reports.cli import main
from llmload.reports.gate.verdict import FAIL, INCONCLUSIVE, GateConfig, evaluate
from llmload.reports.table.loader import load_run
from llmload.reports.table.trust import AMBER, GREEN, NA, RED, assess, starved
from tests.fixtures.reports import make_records

QUIET = HarnessHealth(cpu_percent=30.0, loop_lag_s=0.002, inflight=4)
BUSY = HarnessHealth(cpu_percent=55.0, loop_lag_s=LAG_LINE_S * 3, inflight=4)  # a neighbour
HOT = HarnessHealth(cpu_percent=CPU_LINE_PCT + 5, loop_lag_s=0.001, inflight=4)  # client-bound


def health(**sources: list[HarnessHealth]) -> dict[str, Any]:
    return phase_health(dict(sources))


def test_phase_health_numbers_and_saturation() -> None:
    h = health(local=[QUIET] * 12 + [BUSY, BUSY, HOT])
    p = h["processes"]["local"]
    assert p["samples"] == 15 and p["cpu_max"] == CPU_LINE_PCT + 5 and p["cpu_p50"] == 30.0
    assert p["lag_max_ms"] == pytest.approx(LAG_LINE_S * 3000)
    assert p["saturated_samples"] == 3 and p["saturated_share"] == 0.2
    assert h["starved"] == ["local"]
    assert health(local=[QUIET] * 10)["starved"] == []
    assert health(local=[QUIET] * 19 + [BUSY])["starved"] == []  # one spike in 20 is not starving
    # one slow second in a six-second phase (17 %) is a hiccup: at least 3 samples must be
    assert health(local=[QUIET] * 5 + [BUSY])["starved"] == []


def test_the_master_never_starves_a_phase() -> None:
    h = health(master=[HOT] * 5, **{"worker-0": [QUIET] * 5, "worker-1": [BUSY] * 5})
    assert h["starved"] == ["worker-1"]
    assert starved(health(master=[HOT] * 5, **{"worker-0": [QUIET] * 5})) is None


def test_healthlog_keeps_samples_of_the_open_phase_only() -> None:
    log = HealthLog()
    log.add("local", BUSY)  # before any phase: set-up, ignored
    log.begin("stream")
    log.add("local", QUIET)
    log.add("worker-0", BUSY)
    block = log.end("stream")
    log.add("local", BUSY)  # cool-down, ignored
    assert block is not None and set(block["processes"]) == {"local", "worker-0"}
    assert block["processes"]["local"]["samples"] == 1
    assert log.end("stream") is None


def test_writer_puts_health_into_each_phase_of_run_json(tmp_path: Path) -> None:
    w = RunWriter(tmp_path / "run", {"run_id": "x"})
    w.on_phase("sync", "sync", "start", 1.0)
    for _ in range(4):
        w.on_health("local", QUIET)
    w.on_phase("sync", "sync", "end", 2.0)
    w.on_phase("stream", "stream", "start", 3.0)
    for _ in range(4):
        w.on_health("local", BUSY)
    w.close()
    phases = json.loads((tmp_path / "run" / "run.json").read_text())["phases"]
    assert phases[0]["health"]["processes"]["local"]["samples"] == 4
    assert phases[0]["health"]["starved"] == []
    # a phase still open at close (Ctrl-C) has no health block: its end never came
    assert "health" not in phases[1]


def with_health(run: Path, per_phase: dict[str, dict[str, Any]]) -> Path:
    meta = json.loads((run / "run.json").read_text())
    for ph in meta["phases"]:
        if ph["name"] in per_phase:
            ph["health"] = per_phase[ph["name"]]
    (run / "run.json").write_text(json.dumps(meta))
    return run


@pytest.fixture
def baseline(run_factory: Callable[..., Path], tmp_path: Path) -> Path:
    out = tmp_path / "base.json"
    assert main(["baseline", str(run_factory("base", n=300, seed=1)), "--out", str(out)]) == 0
    return out


def test_gate_refuses_to_call_a_regression_the_harness_may_have_caused(
    run_factory: Callable[..., Path], baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = json.loads(baseline.read_text())
    slow = run_factory("slow", n=300, seed=7, ttft_ms=240)
    cfg = GateConfig()
    assert evaluate(load_run(slow), base, cfg).verdict == FAIL  # no health recorded: as before
    with_health(slow, {"stream": health(local=[QUIET] * 10)})
    assert evaluate(load_run(slow), base, cfg).verdict == FAIL  # a healthy client: a regression
    with_health(slow, {"stream": health(local=[QUIET] * 6 + [BUSY] * 4)})
    result = evaluate(load_run(slow), base, cfg)
    assert result.verdict == INCONCLUSIVE and result.exit_code == 2
    reason = result.checks[0].reason
    assert reason.startswith("inconclusive: the load generator was starved in phase stream")
    assert "CPU p50" in reason and "loop lag p99 60 ms" in reason and "40% of samples" in reason
    assert main(["gate", str(slow), "--baseline", str(baseline)]) == 2
    assert "load generator was starved" in capsys.readouterr().out
    # a stricter share: 40% saturated is below 50%, so the regression stands
    assert main(["gate", str(slow), "--baseline", str(baseline), "--starved-share", "50%"]) == 1
    # a client busy on CPU but whose loop kept up (lag 1 ms) cannot explain a ~20 ms excess
    with_health(slow, {"stream": health(local=[QUIET] * 6 + [HOT] * 4)})
    result = evaluate(load_run(slow), base, cfg)
    assert result.verdict == FAIL and "is less than the" in result.checks[0].reason
    # a starved sync phase says nothing about the stream phase the gate looks at
    with_health(slow, {"stream": health(local=[QUIET] * 10), "sync": health(local=[BUSY] * 9)})
    assert evaluate(load_run(slow), base, cfg).verdict == FAIL


def test_gate_says_a_lost_worker_is_inconclusive(
    run_factory: Callable[..., Path], baseline: Path
) -> None:
    run = run_factory("lost", n=300, seed=7)
    meta = json.loads((run / "run.json").read_text())
    meta["lost_workers"] = [{"worker": "worker-1", "phase": "stream", "lost_requests": 3}]
    (run / "run.json").write_text(json.dumps(meta))
    result = evaluate(load_run(run), json.loads(baseline.read_text()), GateConfig())
    assert result.verdict == INCONCLUSIVE
    assert "worker worker-1 was lost mid-run" in result.checks[-1].reason


def test_trust_box_levels_and_reasons(run_factory: Callable[..., Path]) -> None:
    run = with_health(
        run_factory("ok"), {"sync": health(local=[QUIET] * 5), "stream": health(local=[QUIET] * 5)}
    )
    summary = build_run(run)
    assert summary.trust is not None
    items = {i["check"]: i for i in summary.trust["items"]}
    assert items["harness health"]["level"] == GREEN
    assert "CPU p50 30%" in items["harness health"]["reason"]
    # the fixture's client count is one short on every 10th request
    assert items["token counts"]["level"] == RED and "differ in" in items["token counts"]["reason"]
    assert items["client − server TTFT"]["level"] == GREEN
    assert items["schedule delay"]["level"] == NA
    assert items["lost records"]["level"] == GREEN
    assert summary.trust["level"] == RED
    harness_block = summary.to_json()["phases"]["stream"]["harness"]
    assert harness_block["processes"]["local"]["samples"] == 5

    starving = with_health(run, {"stream": health(local=[BUSY] * 5)})
    trust = assess(build_run(starving))
    harness = trust["items"][0]
    assert harness["level"] == RED and "starved in phase stream" in harness["reason"]
    assert "bundled server" not in harness["reason"]
    meta = json.loads((starving / "run.json").read_text())
    meta["bundled_server"] = {"engine": "transformers"}  # loadtest started our own server
    (starving / "run.json").write_text(json.dumps(meta))
    harness = assess(build_run(starving))["items"][0]
    assert "the bundled server ran on this machine beside the load generator" in harness["reason"]
    briefly = with_health(run, {"stream": health(local=[QUIET] * 19 + [BUSY])})
    assert assess(build_run(briefly))["items"][0]["level"] == AMBER
    old = run_factory("old")  # a run without health blocks
    assert assess(build_run(old))["items"][0]["level"] == AMBER


def test_a_starved_client_whose_delay_is_small_against_ttft_is_amber_not_red(
    run_factory: Callable[..., Path],
) -> None:
    """30 ms of loop lag beside a ~500 ms sync TTFT cannot move the figures: read with care."""
    run = run_factory("ok")  # sync TTFT p50 ~500 ms, stream ~205 ms
    late = HarnessHealth(cpu_percent=5.0, loop_lag_s=0.03, inflight=4)  # above the 20 ms line
    item = assess(build_run(with_health(run, {"sync": health(local=[late] * 5)})))["items"][0]
    assert item["level"] == AMBER and "starved in phase sync" in item["reason"]
    assert "small against TTFT p50" in item["reason"]
    late = HarnessHealth(cpu_percent=5.0, loop_lag_s=0.06, inflight=4)  # > 10 % of 500 ms
    item = assess(build_run(with_health(run, {"sync": health(local=[late] * 5)})))["items"][0]
    assert item["level"] == RED


def test_every_report_shows_trust_and_harness(run_factory: Callable[..., Path]) -> None:
    from llmload.reports.page.terminal import render_terminal

    run = with_health(run_factory("shown"), {"stream": health(local=[QUIET] * 4 + [BUSY])})
    summary = build_run(run)
    md = (run / "summary.md").read_text()
    html = (run / "report.html").read_text()
    term = render_terminal(summary)
    assert "Can I trust these numbers?" in md and "stream: load generator CPU p50" in md
    assert html.index('id="trust"') < html.index('class="cards"')
    assert 'id="harness-table"' in html and "loop lag p99" in html
    assert term.splitlines()[1].startswith("trust: ") and "harness health" in term
    on_disk = json.loads((run / "summary.json").read_text())
    assert on_disk["trust"]["level"] in (GREEN, AMBER, RED)


def test_the_live_status_line_shows_the_busiest_client_process() -> None:
    import io

    from llmload.loadtests.run.status import StatusLine

    status = StatusLine(io.StringIO())
    status.begin("stream", "stream", 10.0)
    assert "client CPU" not in status.line()  # nothing sampled yet
    status.on_health("worker-0", QUIET)
    assert status.line().endswith("| client CPU 30% lag 2 ms")
    status.on_health("master", HOT)  # forwards only: not the client's health
    status.on_health("worker-1", BUSY)
    assert status.line().endswith("| client CPU 55% lag 60 ms saturated")


def test_the_runs_late_warning_blames_the_cap_only_when_every_user_was_busy() -> None:
    status = StatusLine(stream=io.StringIO())
    status.begin("stream", "stream", 10.0)
    for _ in range(3):  # three in flight at once, then all done
        status.on_request_start("stream", "s", "/v1/chat/completions")
    for r in make_records("stream", "stream", 3, t_start=0.0):
        status.on_record(r)
    status.on_request_start("stream", "s", "/v1/chat/completions")
    tally = status.current
    assert tally is not None and tally.peak_inflight == 3
    assert late_hint(64, tally.peak_inflight) == (
        "at most 3 of the 64 users were busy: the load generator itself fell behind — see its "
        "harness health"
    )
    assert late_hint(3, 3) == late_hint(64, 60) == "raise --users, the open-loop concurrency cap"
    # several workers: this process does not see every start as it happens
    assert late_hint(64, 3, shards=2).startswith("raise --users")
