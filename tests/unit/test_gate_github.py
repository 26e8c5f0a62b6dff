"""The gate on GitHub Actions: --inconclusive policy, ::error::/::warning:: lines, step outputs."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from llmload.reports.cli import main
from llmload.reports.gate import github
from llmload.reports.gate.verdict import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    Check,
    GateConfig,
    GateResult,
)


def gate(run: Path, base: Path, *extra: str) -> int:
    return main(["gate", str(run), "--baseline", str(base), *extra])


@pytest.fixture
def baseline(run_factory: Callable[..., Path], tmp_path: Path) -> Path:
    out = tmp_path / "base.json"
    assert main(["baseline", str(run_factory("base", n=300, seed=1)), "--out", str(out)]) == 0
    return out


def test_inconclusive_policy_maps_only_the_inconclusive_verdict(
    run_factory: Callable[..., Path], baseline: Path
) -> None:
    tiny = run_factory("tiny", n=12, seed=7)
    assert gate(tiny, baseline) == 2
    assert gate(tiny, baseline, "--inconclusive", "neutral") == 2
    assert gate(tiny, baseline, "--inconclusive", "pass") == 0
    assert gate(tiny, baseline, "--inconclusive", "fail") == 1
    slow = run_factory("slow", n=300, seed=7, ttft_ms=240)
    assert gate(slow, baseline, "--inconclusive", "pass") == 1  # a regression stays a failure
    with pytest.raises(SystemExit) as usage:
        gate(tiny, baseline, "--inconclusive", "maybe")
    assert usage.value.code == 2


def test_actions_outputs_and_annotations(
    run_factory: Callable[..., Path],
    baseline: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    outputs = tmp_path / "out.txt"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    assert gate(run_factory("slow", n=300, seed=7, ttft_ms=240), baseline) == 1
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("::")]
    # one error per failed check: the mode over all requests, and two of its three scenarios
    assert len(lines) == 3
    assert lines[0].startswith("::error title=llmload gate%3A ttft p95 stream::")
    assert lines[1].startswith("::error title=llmload gate%3A ttft p95 stream · short::")
    assert all("regression beyond allowed +10%25 with 95%25 confidence" in ln for ln in lines)
    got = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert got["verdict"] == FAIL and got["exit_code"] == "1" and got["mode"] == "stream"
    assert got["headline"].startswith("TTFT p95 +")
    low, ratio, high = (float(got[k]) for k in ("ratio_low", "ratio", "ratio_high"))
    assert 1.10 < low <= ratio <= high  # 20% slower: the lower bound is past +10%
    assert float(got["run_ms"]) > float(got["baseline_ms"]) > 0


def test_no_annotations_off_actions(
    run_factory: Callable[..., Path],
    baseline: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for var in ("GITHUB_ACTIONS", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(var, raising=False)
    assert gate(run_factory("tiny", n=12, seed=7), baseline) == 2
    assert "::warning" not in capsys.readouterr().out


def test_warning_per_inconclusive_check_and_escaping() -> None:
    checks = [
        Check("ttft p95 stream", INCONCLUSIVE, "too few samples:\n50% more, run longer"),
        Check("ttft p95 sync", PASS, "within allowed +10%"),
    ]
    result = GateResult(GateConfig(inconclusive="pass"), checks)
    assert github.annotation_lines(result) == [
        "::warning title=llmload gate%3A ttft p95 stream::too few samples:%0A50%25 more, run longer"
    ]
    assert github.outputs(result)["exit_code"] == "0" and github.outputs(result)["ratio"] == ""
    out = io.StringIO()
    github.publish(result, "md", {}, out)  # nothing asked for: nothing written
    assert out.getvalue() == ""
    empty = GateResult(GateConfig(), [])
    assert github.annotation_lines(empty)[0].startswith("::warning title=llmload gate::no checks")
