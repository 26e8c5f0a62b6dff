"""``--repeat N`` and ``--baseline-target``: the phase plan, the spread, the paired gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmload.loadtests.options import build_options
from llmload.loadtests.run.phaseloop import plan_phases
from llmload.reports.build import build_run
from llmload.reports.cli import main
from llmload.reports.gate.baseline import make_baseline
from llmload.reports.gate.verdict import FAIL, GateConfig, evaluate, evaluate_paired
from llmload.reports.table.loader import load_run
from tests.fixtures.reports import make_records, write_run

T0 = 1_700_000_000.0


def test_repeats_interleave_with_the_baseline_target() -> None:
    opts = build_options(
        {},
        {"target": "http://a", "baseline_target": "http://b", "repeat": 2, "warmup": "2s"},
    )
    got = [(p.name, p.mode, p.target, p.warmup) for p in plan_phases(opts.load, baseline=True)]
    assert got == [
        ("warmup", "sync", "run", True),
        ("baseline-warmup", "sync", "baseline", True),
        ("sync-1", "sync", "run", False),
        ("baseline-sync-1", "sync", "baseline", False),
        ("stream-1", "stream", "run", False),
        ("baseline-stream-1", "stream", "baseline", False),
        # the second repeat runs the baseline's twin first (a crossover: A/B, B/A)
        ("baseline-sync-2", "sync", "baseline", False),
        ("sync-2", "sync", "run", False),
        ("baseline-stream-2", "stream", "baseline", False),
        ("stream-2", "stream", "run", False),
    ]
    one = build_options({}, {"target": "http://a"})
    assert [p.name for p in plan_phases(one.load)] == ["sync", "stream"]  # names as before
    assert opts.config()["baseline_target"] == "http://b"


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"baseline_target": "http://a"}, "another target"),
        ({"baseline_target": "http://b", "workers": 2}, "one process"),
        ({"repeat": 0}, "--repeat must be >= 1"),
    ],
)
def test_bad_repeat_settings_are_named(given: dict, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        build_options({}, {"target": "http://a", **given})


def paired_run(
    path: Path, run_ttft: float = 240.0, base_ttft: float = 200.0, status: str = "completed"
) -> Path:
    """A/B/A/B: stream-1, baseline-stream-1, stream-2, baseline-stream-2 (150 requests each)."""
    recs = []
    for i, (name, ttft) in enumerate(
        (
            ("stream-1", run_ttft),
            ("baseline-stream-1", base_ttft),
            ("stream-2", run_ttft),
            ("baseline-stream-2", base_ttft),
        )
    ):
        recs += make_records(name, "stream", 150, t_start=T0 + 10 * i, seed=i, ttft_ms=ttft)
    return write_run(
        path,
        recs,
        meta={
            "baseline_target": {"target": "http://b", "model": "synthetic"},
            "config": {"repeat": 2},
            "status": status,
        },
    )


def test_the_paired_gate_compares_the_two_targets_of_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = paired_run(tmp_path / "ab")
    result = evaluate_paired(load_run(run), GateConfig(metric="ttft,itl"))
    checks = {c.name: c for c in result.checks}
    assert checks["ttft p95 stream"].verdict == FAIL
    assert checks["ttft p95 stream"].numbers["run_n"] == 300  # both repeats, pooled
    assert {(s["target"], s["metric"]) for s in result.spread} >= {
        ("run", "ttft p95"),
        ("baseline", "ttft p95"),
    }
    # the command decides on the pairs: two pairs are one degree of freedom, too few to
    # confirm +20 % against +10 % allowed (the pooled bootstrap above could not know that)
    assert main(["gate", str(run), "--metric", "ttft,itl"]) != 1
    out = capsys.readouterr().out
    assert "ttft p95 stream: 2 pairs run in turn on the two targets" in out
    assert "1 degrees of freedom" in out
    assert "vs baseline --baseline-target http://b (same run)" in out
    assert "between-run spread" in out
    # the report: each repeat and the spread between them, per target
    summary = build_run(run)
    rows = {(r["target"], r["metric"]): r for r in summary.extra["repeats"]}
    ttft = rows[("run", "TTFT p95 ms")]
    assert list(ttft["phases"]) == ["stream-1", "stream-2"] and ttft["spread_pct"] >= 0
    assert "Between-run spread" in (run / "report.html").read_text()


def test_a_run_without_baseline_phases_needs_a_baseline_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "r", make_records("stream", "stream", 100, t_start=T0))
    assert main(["gate", str(run)]) == 2
    err = capsys.readouterr().err
    assert "has no --baseline-target phases: give --baseline FILE" in err


def test_phases_of_one_mode_are_repeats_only_with_repeat(tmp_path: Path) -> None:
    """A capacity search's steps are phases of one mode too: no spread between them."""
    recs = []
    for i, ttft in enumerate((100.0, 300.0)):
        recs += make_records(f"step-{i}", "stream", 150, t_start=T0 + 10 * i, seed=i, ttft_ms=ttft)
    path = write_run(tmp_path / "steps", recs, meta={"config": {"repeat": 1}})
    assert "repeats" not in build_run(path).extra
    run = load_run(path)
    assert evaluate(run, make_baseline(run), GateConfig(metric="ttft")).spread == []


def test_an_interrupted_paired_run_is_named_once(tmp_path: Path) -> None:
    """Gated on its own or against a history of pairs, an interrupted ``--baseline-target``
    run's completeness check is inconclusive, said once."""
    from llmload.reports.gate.history import append, gate_history, gate_paired

    history = tmp_path / "pairs"
    append(load_run(paired_run(tmp_path / "done", 200.0, 200.0)), history, label="main")
    stopped = load_run(paired_run(tmp_path / "cut", status="interrupted"))
    for result in (
        gate_paired(stopped, GateConfig()),
        gate_history(stopped, history, GateConfig())[0],
    ):
        said = [c for c in result.checks if c.name == "run complete"]
        assert len(said) == 1 and said[0].verdict == "inconclusive", result.checks
