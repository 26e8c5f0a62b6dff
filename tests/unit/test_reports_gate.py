"""The gate's decisions on runs drawn from known distributions, and its outputs."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from llmload.reports.cli import main
from llmload.reports.gate.baseline import (
    MAX_VALUES,
    BaselineError,
    compact,
    make_baseline,
    read_baseline,
)
from llmload.reports.gate.bootstrap import Side, compare
from llmload.reports.gate.result import Check
from llmload.reports.gate.sides import ALL
from llmload.reports.gate.verdict import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    GateConfig,
    decide_family,
    evaluate,
)
from llmload.reports.table.loader import load_run
from tests.fixtures.reports import make_records, write_run


def relative_check(mode: str, base: dict, run_vals: list[float], cfg: GateConfig) -> Check:
    """One latency check on its own (a family of one): ``base`` is a baseline group entry."""
    spec = cfg.specs()[0]
    b, r = Side.of(base["values_ms"], int(base["n"])), Side.of(list(run_vals))
    c = compare(spec, mode, ALL, b, r, cfg.resamples, cfg.seed)
    return decide_family([c], cfg)[0]


def gate(run: Path, base: Path, *extra: str) -> int:
    return main(["gate", str(run), "--baseline", str(base), *extra])


@pytest.fixture
def baseline(run_factory: Callable[..., Path], tmp_path: Path) -> Path:
    out = tmp_path / "base.json"
    assert main(["baseline", str(run_factory("base", n=300, seed=1)), "--out", str(out)]) == 0
    return out


def test_same_distribution_passes(
    run_factory: Callable[..., Path], baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gate(run_factory("aa", n=300, seed=7), baseline) == 0
    out = capsys.readouterr().out
    assert (
        "gate passed (exit 0)" in out and "p95 ttft stream" in out and "within allowed +10%" in out
    )


def test_twenty_percent_slower_fails(
    run_factory: Callable[..., Path], baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gate(run_factory("slow", n=300, seed=7, ttft_ms=240), baseline) == 1
    out = capsys.readouterr().out
    assert "FAILED (exit 1)" in out and "regression beyond allowed +10% with 95% confidence" in out


def test_tiny_run_is_inconclusive(run_factory: Callable[..., Path], baseline: Path) -> None:
    assert gate(run_factory("tiny", n=12, seed=7), baseline) == 2


def test_absolute_limit(run_factory: Callable[..., Path], baseline: Path) -> None:
    run = run_factory("abs", n=300, seed=7)
    assert gate(run, baseline, "--max-ttft-p95-ms", "150") == 1
    assert gate(run, baseline, "--max-ttft-p95-ms", "1000") == 0


def test_bad_baseline_and_missing_run_exit_2(
    run_factory: Callable[..., Path], baseline: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "something else"}')
    run = run_factory("r", n=100)
    assert gate(run, bad) == 2
    assert gate(run, tmp_path / "absent.json") == 2
    assert gate(tmp_path / "no-run", baseline) == 2
    with pytest.raises(BaselineError):
        read_baseline(bad)


def test_markdown_step_summary_and_junit(
    run_factory: Callable[..., Path],
    baseline: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    step = tmp_path / "step.md"
    step.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    junit, md = tmp_path / "j.xml", tmp_path / "g.md"
    run = run_factory("slow", n=300, seed=7, ttft_ms=240)
    assert gate(run, baseline, "--junit", str(junit), "--summary-md", str(md)) == 1
    text = step.read_text()
    assert text.startswith("earlier step\n") and "llmload TTFT gate FAILED" in text
    assert md.read_text() in text and "| ttft p95 stream | ❌ fail |" in text
    suite = ET.parse(junit).getroot().find("testsuite")
    # the mode over all requests and each of its three scenarios: one family of four checks
    assert suite is not None and suite.get("tests") == "4" and suite.get("failures") == "3"
    failure = suite.find("testcase/failure")
    assert failure is not None and "regression beyond" in (failure.get("message") or "")
    # default JUnit path is inside the run directory
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    assert gate(run, baseline) == 1 and (run / "junit.xml").exists()


def test_verdict_is_deterministic(run_factory: Callable[..., Path], baseline: Path) -> None:
    run = load_run(run_factory("det", n=300, seed=9, ttft_ms=220))
    base = json.loads(baseline.read_text())
    a = evaluate(run, base, GateConfig())
    b = evaluate(run, base, GateConfig())
    assert [c.numbers for c in a.checks] == [c.numbers for c in b.checks]


def test_wide_interval_is_inconclusive() -> None:
    rng = random.Random(3)
    heavy = [rng.paretovariate(1.2) * 100 for _ in range(70)]
    base = compact([rng.paretovariate(1.2) * 100 for _ in range(70)])
    check = relative_check("stream", base, heavy, GateConfig())
    assert check.verdict == INCONCLUSIVE and "too noisy" in check.reason
    assert check.numbers["ci_low_pct"] < 0 < 20 < check.numbers["ci_high_pct"]


def test_regression_below_threshold_passes_and_above_fails() -> None:
    rng = random.Random(5)
    base_vals = [rng.gauss(200, 10) for _ in range(2000)]
    base = compact(base_vals)
    small = relative_check("stream", base, [rng.gauss(208, 10) for _ in range(2000)], GateConfig())
    big = relative_check("stream", base, [rng.gauss(260, 10) for _ in range(2000)], GateConfig())
    assert small.verdict == PASS and big.verdict == FAIL
    assert 15 < big.numbers["change_pct"] < 35


def test_large_groups_are_stored_as_a_quantile_sketch(run_factory: Callable[..., Path]) -> None:
    doc = make_baseline(load_run(run_factory("big", n=300, tokens=20)))
    itl = doc["metrics"]["itl"]["stream"]
    assert itl["n"] == 300 * 19 and itl["sketch"] is True and len(itl["values_ms"]) == MAX_VALUES
    ttft = doc["metrics"]["ttft"]["stream"]
    assert ttft["sketch"] is False and ttft["n"] == len(ttft["values_ms"]) == 300
    assert "secret" not in json.dumps(doc) and "sk-123" not in json.dumps(doc)


def test_mode_missing_from_baseline_is_inconclusive(
    run_factory: Callable[..., Path], baseline: Path
) -> None:
    doc = json.loads(baseline.read_text())
    del doc["metrics"]["ttft"]["sync"]
    baseline.write_text(json.dumps(doc))
    assert gate(run_factory("m", n=300, seed=7), baseline, "--mode", "sync") == 2


@pytest.mark.parametrize(
    "bad", [["--percentile", "150"], ["--confidence", "1.5"], ["--max-regression=-5%"]]
)
def test_bad_gate_settings_exit_2(
    run_factory: Callable[..., Path],
    baseline: Path,
    bad: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert gate(run_factory("s", n=100), baseline, *bad) == 2
    assert "must" in capsys.readouterr().err


def open_loop_run(path: Path, seed: int, delay_s: float = 0.0) -> Path:
    """A stream phase with known TTFT whose requests went out ``delay_s`` after their slot."""
    recs = make_records("stream", "stream", 300, t_start=1_700_000_000.0, seed=seed, open_loop=True)
    if delay_s:
        recs = [replace(r, schedule_delay_s=delay_s) for r in recs]
    return write_run(path, recs)


def test_from_intended_catches_what_the_sent_time_hides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "ol-base.json"
    assert main(["baseline", str(open_loop_run(tmp_path / "b", 1)), "--out", str(base)]) == 0
    doc = json.loads(base.read_text())
    assert doc["metrics"]["ttft_from_intended"]["stream"]["n"] == 300
    # same server, same TTFT; but the generator fell behind: every request left 80 ms late
    late = open_loop_run(tmp_path / "late", 7, delay_s=0.08)
    assert gate(late, base) == 0  # TTFT from the send time cannot see it
    assert gate(late, base, "--from-intended") == 1
    out = capsys.readouterr().out
    assert "p95 ttft from intended send stream" in out and "regression beyond" in out
    assert gate(open_loop_run(tmp_path / "ok", 7), base, "--from-intended") == 0
    # the absolute limit follows: TTFT p95 ~235 ms sent, ~315 ms from the intended time
    assert gate(late, base, "--max-ttft-p95-ms", "280") == 0
    assert gate(late, base, "--from-intended", "--max-ttft-p95-ms", "280") == 1
    assert "TTFT from intended send p95 stream" in capsys.readouterr().out


def test_from_intended_needs_open_loop_data(
    run_factory: Callable[..., Path],
    baseline: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # closed-loop baseline: nothing from the intended send time to compare against
    assert "ttft_from_intended" not in json.loads(baseline.read_text())["metrics"]
    ol = open_loop_run(tmp_path / "ol", 7)
    assert gate(ol, baseline, "--from-intended") == 2
    assert "make it from an open-loop run" in capsys.readouterr().out
    ol_base = tmp_path / "ol.json"
    assert main(["baseline", str(ol), "--out", str(ol_base)]) == 0
    # closed-loop run against an open-loop baseline: the run has no schedule delays
    assert gate(run_factory("closed", n=300, seed=7), ol_base, "--from-intended") == 2
    assert "has no schedule delays" in capsys.readouterr().out
    assert gate(ol, ol_base, "--from-intended", "--metric", "itl") == 2
    assert "--from-intended must go with" in capsys.readouterr().err


def scenario_run(path: Path, scenario: str, seed: int, ttft_ms: float = 200.0) -> Path:
    """One stream phase of a single workload (a trace, prefix or agent run is one scenario)."""
    recs = make_records(
        "stream", "stream", 300, t_start=1.7e9, seed=seed, ttft_ms=ttft_ms, scenarios=(scenario,)
    )
    return write_run(path, recs)
