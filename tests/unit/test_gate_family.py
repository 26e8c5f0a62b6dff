"""Several metrics in one verdict: the registry, Holm–Bonferroni, per-scenario checks, the table."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from llmload.reports.cli import main
from llmload.reports.gate.baseline import make_baseline
from llmload.reports.gate.bootstrap import Comparison
from llmload.reports.gate.holm import holm_adjusted
from llmload.reports.gate.metrics import DOWN, parse_metrics
from llmload.reports.gate.verdict import FAIL, PASS, GateConfig, decide_family, evaluate
from llmload.reports.table.loader import load_run
from tests.fixtures.reports import make_records, write_run

T0 = 1_700_000_000.0


def gate(run: Path, base: Path, *extra: str) -> int:
    return main(["gate", str(run), "--baseline", str(base), *extra])


def test_holm_adjusted_p_values() -> None:
    # sorted: .005*4 = .02, .01*3 = .03, .03*2 = .06, then .04*1 = .04 -> kept at .06 (monotone)
    assert holm_adjusted([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm_adjusted([0.5]) == [0.5] and holm_adjusted([]) == []
    assert holm_adjusted([0.9, 0.8]) == [1.0, 1.0]  # 2 x 0.8 capped at 1


def test_holm_keeps_the_family_wise_rate_where_separate_tests_do_not() -> None:
    # five tests of true null hypotheses (uniform p-values): any false alarm, per family
    rng = random.Random(11)
    families = [[rng.random() for _ in range(5)] for _ in range(4000)]
    separate = sum(any(p <= 0.05 for p in ps) for ps in families) / len(families)
    holm = sum(any(p <= 0.05 for p in holm_adjusted(ps)) for ps in families) / len(families)
    assert separate > 0.18  # 1 - 0.95^5 = 0.23: five gates at 5 % each
    assert holm <= 0.06


def test_metric_list_parsing() -> None:
    specs = parse_metrics("ttft:p99:5%,itl,throughput:5%,error-rate", 95.0, 0.10)
    assert [s.name for s in specs] == ["ttft p99", "itl p95", "throughput", "error-rate"]
    assert [s.allowed for s in specs] == pytest.approx([0.05, 0.10, 0.05, 0.01])
    assert specs[2].metric.harm == DOWN and specs[2].allowed_text == "−5%"
    assert specs[3].allowed_text == "+1 point"
    assert parse_metrics("ttft", from_intended=True)[0].metric.name == "ttft_from_intended"
    for bad, says in (
        ("ttft,nope", "unknown metric 'nope'"),
        ("throughput:p95", "not compared by a percentile"),
        ("ttft:p100", "percentile must be in"),
        ("ttft:lots", "not an allowance"),
        ("ttft,ttft", "given twice"),
        ("", "at least one"),
    ):
        with pytest.raises(ValueError, match=says):
            parse_metrics(bad)


def two_runs(tmp_path: Path, base_kw: dict, run_kw: dict, n: int = 300) -> tuple[Path, Path]:
    """A baseline file and a run: one stream phase each, three scenarios."""
    base = write_run(tmp_path / "b", make_records("stream", "stream", n, t_start=T0, **base_kw))
    out = tmp_path / "base.json"
    assert main(["baseline", str(base), "--out", str(out)]) == 0
    run = write_run(tmp_path / "r", make_records("stream", "stream", n, t_start=T0, **run_kw))
    return out, run


def verdicts(run: Path, base: Path, metric: str) -> dict[str, str]:
    doc = json.loads(base.read_text())
    result = evaluate(load_run(run), doc, GateConfig(metric=metric))
    return {c.name: c.verdict for c in result.checks}


def test_one_verdict_names_the_metric_that_moved(tmp_path: Path) -> None:
    base, run = two_runs(tmp_path, {"seed": 1}, {"seed": 2, "itl_ms": 24.0})
    got = verdicts(run, base, "ttft,itl,throughput,error-rate")
    assert got["itl p95 stream"] == FAIL
    assert got["ttft p95 stream"] == PASS and got["error-rate stream"] == PASS
    # the same requests started at the same times, each decoding 20 % longer: tokens still
    # arrive at the rate the start times set, so the throughput is flat
    assert got["throughput stream"] == PASS
    same_base, same = two_runs(tmp_path / "aa", {"seed": 1}, {"seed": 2})
    assert set(verdicts(same, same_base, "ttft,itl,throughput,error-rate").values()) == {PASS}


def test_throughput_gates_a_drop_and_error_rate_a_rise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, fewer = two_runs(tmp_path, {"seed": 1}, {"seed": 2, "tokens": 12})  # 25 % fewer tokens
    assert gate(fewer, base, "--metric", "throughput") == 1
    out = capsys.readouterr().out
    assert "drop beyond allowed −10% with 95% confidence" in out and "tokens/s" in out
    assert gate(fewer, base, "--metric", "throughput:30%") == 0
    base2, failing = two_runs(tmp_path / "e", {"seed": 1}, {"seed": 2, "error_every": 10})
    assert gate(failing, base2, "--metric", "error-rate") == 1
    out = capsys.readouterr().out
    assert "error rate stream: 0.0% → 10.0% (+10.0 points" in out
    assert gate(failing, base2, "--metric", "error-rate:15%") == 0


def test_headline_names_the_scenario_that_regressed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_run(tmp_path / "b", make_records("stream", "stream", 600, t_start=T0, seed=1))
    doc = tmp_path / "base.json"
    assert main(["baseline", str(base), "--out", str(doc)]) == 0
    recs = make_records("stream", "stream", 600, t_start=T0, seed=2)
    slow = [replace(r, ttft_s=(r.ttft_s or 0) * 1.3) if r.scenario == "code" else r for r in recs]
    run = write_run(tmp_path / "r", slow)
    assert gate(run, doc, "--metric", "ttft,itl") == 1
    lines = capsys.readouterr().out.splitlines()
    head = lines[next(i for i, ln in enumerate(lines) if ln.startswith("llmload gate")) + 1]
    assert "code TTFT p95 +" in head and "short TTFT" not in head, head
    checks = {c["name"]: c for c in json.loads((run / "gate.json").read_text())["checks"]}
    assert checks["ttft p95 stream · code"]["verdict"] == FAIL
    assert checks["ttft p95 stream · short"]["verdict"] == PASS
    assert checks["itl p95 stream"]["verdict"] == PASS
    family = checks["ttft p95 stream"]["numbers"]["family"]
    assert family == 8  # 2 metrics x (all + 3 scenarios), one Holm family


def test_table_in_every_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, run = two_runs(tmp_path, {"seed": 1}, {"seed": 2, "ttft_ms": 240.0})
    step = tmp_path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    assert gate(run, base, "--metric", "ttft,itl,throughput") == 1
    text = capsys.readouterr().out
    md, page = step.read_text(), (run / "gate.html").read_text()
    for name in ("ttft p95 stream", "itl p95 stream", "throughput stream"):
        assert name in text and f"| {name} |" in md and f"<td>{name}</td>" in page
    assert "family-wise bounds" in md and "p (Holm)" in page and "Holm–Bonferroni" in text
    suite = ET.parse(run / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    outs = [e.text or "" for e in suite.iter("system-out")]
    assert any("family-wise bounds:" in o and "allowed: +10%" in o for o in outs)
    assert "--allow-difference" not in text  # same fixture settings: comparable


def test_a_metric_older_records_lack_reads_as_no_samples(
    run_factory: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # ttfo_s is a newer record field: a run without it has nothing to gate on TTFO
    run = run_factory("r", n=300, seed=2)
    out = tmp_path / "base.json"
    assert main(["baseline", str(run_factory("b", n=300, seed=1)), "--out", str(out)]) == 0
    assert gate(run, out, "--metric", "ttft,ttfo") == 2
    text = capsys.readouterr().out
    assert "the baseline has no ttfo values for mode stream" in text
    assert "ttfo" not in make_baseline(load_run(run))["metrics"]


def test_capacity_only_alone_and_bad_metric_is_bad_input(
    run_factory: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = run_factory("r", n=100)
    out = tmp_path / "base.json"
    assert main(["baseline", str(run), "--out", str(out)]) == 0
    assert gate(run, out, "--metric", "ttft,capacity") == 2
    assert "give it alone" in capsys.readouterr().err
    assert gate(run, out, "--metric", "ttft,latency") == 2
    err = capsys.readouterr().err
    assert "unknown metric 'latency'" in err and "Traceback" not in err


def comparison(p_value: float, name: str = "ttft") -> Any:
    """A ttft comparison whose bootstrap puts ``p_value`` of its changes within +10 %."""
    spec = parse_metrics(name)[0]
    k = round(p_value * 2001) - 1  # p = (k + 1) / (B + 1) with B = 2000
    boots = np.array([1.05] * k + [1.3] * (2000 - k))
    return Comparison(spec, "stream", "all", 200.0, 260.0, 1.3, boots, 300, 300)


def test_two_checks_each_significant_alone_are_not_a_family_failure() -> None:
    # p = 0.03 and 0.04: each would fail a 5 % gate on its own; Holm: 0.06 and 0.06
    a, b = comparison(0.03), comparison(0.04, "itl")
    assert a.p_value() == pytest.approx(0.03, abs=1e-3)
    alone = decide_family([a], GateConfig())
    assert alone[0].verdict == FAIL
    family = decide_family([a, b], GateConfig())
    assert [c.verdict for c in family] == [PASS, PASS]
    assert family[0].numbers["p_holm"] == pytest.approx(0.06, abs=2e-3)
    # beside a clear failure (0.002 x 2 <= 0.05) Holm steps down and judges 0.04 at 5 %
    # alone — where Bonferroni (0.04 > 0.05 / 2) would not call it
    clear = decide_family([comparison(0.002), b], GateConfig())
    assert [c.verdict for c in clear] == [FAIL, FAIL]
    assert decide_family([comparison(0.2), b], GateConfig())[1].verdict == PASS
