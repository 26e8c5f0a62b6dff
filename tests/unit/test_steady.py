"""Steady state from the data: MSER-5 on series with a known transient, and ``--warmup auto``."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from llmload.loadtests.options import build_options
from llmload.loadtests.run.phaseloop import plan_phases
from llmload.loadtests.steady import mser
from llmload.reports.build import build_run
from llmload.reports.gate.baseline import make_baseline
from llmload.reports.table.loader import load_run
from llmload.reports.table.steady import steady_part
from tests.fixtures.reports import make_records, write_run

T0 = 1_700_000_000.0


def series(transient: int, n: int = 120, seed: int = 0, shape: str = "decay") -> list[float]:
    """200 ms of noise (sd 15 ms), after ``transient`` observations of a start-up transient."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        extra = 0.0
        if i < transient:
            extra = 300.0 * (1 - i / transient) if shape == "decay" else 250.0
        out.append(200.0 + extra + rng.gauss(0, 15))
    return out


@pytest.mark.parametrize("transient", [10, 20, 30])
def test_mser5_finds_a_decaying_transient(transient: int) -> None:
    found = sorted(mser(series(transient, seed=s)) for s in range(21))
    median = found[len(found) // 2]
    assert transient - 5 <= median <= transient + 5, found
    assert all(f % 5 == 0 for f in found)  # batches of five observations


def test_mser5_on_a_step_a_flat_series_and_a_short_one() -> None:
    assert mser(series(15, shape="step")) == 15
    assert sorted(mser(series(0, seed=s)) for s in range(21))[10] == 0
    assert mser([500.0] * 3 + [200.0] * 6) == 0  # fewer than two batches: nothing to say
    assert mser([]) == 0


def test_warmup_auto_is_one_declared_option() -> None:
    opts = build_options({}, {"target": "http://x", "warmup": "auto"})
    assert opts.load.warmup == "auto" and opts.config()["warmup"] == "auto"
    assert [p.name for p in plan_phases(opts.load)] == ["sync", "stream"]  # no warm-up phase
    fixed = build_options({}, {"target": "http://x", "warmup": "5s"})
    assert [p.name for p in plan_phases(fixed.load)][0] == "warmup"
    with pytest.raises(ValueError, match="or auto"):
        build_options({}, {"target": "http://x", "warmup": "soon"})


def cold_run(path: Path, warmup: object, seconds: int = 40, cold_s: int = 12) -> Path:
    """One stream phase, 10 requests a second; TTFT 600 ms for ``cold_s`` s, then 200 ms."""
    recs = make_records("stream", "stream", seconds * 10, t_start=T0, seed=3)
    recs = [
        replace(
            r, started_at=T0 + i * 0.1, ttft_s=(r.ttft_s or 0) * (3.0 if i < cold_s * 10 else 1)
        )
        for i, r in enumerate(recs)
    ]
    run = write_run(path, recs)
    meta = json.loads((run / "run.json").read_text())
    meta["config"]["warmup"] = warmup
    meta["phases"][0]["started_at"] = T0
    (run / "run.json").write_text(json.dumps(meta))
    return run


def test_warmup_auto_leaves_the_transient_out_of_every_statistic(tmp_path: Path) -> None:
    run = cold_run(tmp_path / "auto", "auto")
    loaded = load_run(run)
    start = loaded.steady_starts["stream"]
    assert 10 <= start - T0 <= 15  # the cold part ended at 12 s
    assert all(r.started_at >= start for r in loaded.measured)
    summary = build_run(run)
    steady = summary.phases["stream"].extra["steady"]
    assert steady["method"] == "MSER-5" and steady["applied"] and steady["records_left_out"] >= 100
    assert summary.phases["stream"].dist("ttft_ms").p95 < 300  # the 600 ms start is gone
    assert "steady from +" in (run / "summary.md").read_text()
    assert 'class="steady"' in (run / "report.html").read_text()
    assert make_baseline(loaded)["metrics"]["ttft"]["stream"]["n"] == len(loaded.measured)
    # without --warmup auto the point is reported and nothing is left out
    fixed = build_run(cold_run(tmp_path / "fixed", 0.0))
    block = fixed.phases["stream"].extra["steady"]
    assert not block["applied"] and block["records_left_out"] == 0 and block["start_s"] >= 10
    assert fixed.phases["stream"].dist("ttft_ms").p95 > 500


def test_a_capacity_step_keeps_its_steady_part() -> None:
    recs = make_records("step01", "stream", 60, t_start=T0, seed=1)
    recs = [replace(r, ttft_s=(r.ttft_s or 0) * (4 if i < 15 else 1)) for i, r in enumerate(recs)]
    kept, dropped = steady_part(recs)
    assert dropped == 15 and len(kept) == 45
    assert steady_part(recs[:8]) == (recs[:8], 0)
