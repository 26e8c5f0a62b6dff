"""The gate end to end: real load tests (``loadtests run``) against the bundled synthetic server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llmload.ci import SERVER_ARGS, run_load, synthetic_server
from llmload.reports.cli import main
from tests.fixtures.server_proc import ServerProcess

#: shorter than `make ci-gate` (10 s) to keep the suite quick; still ~100 streamed requests,
#: beyond the 60 the gate needs for p95
SHORT = ("--duration", "4s", "--warmup", "1s")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Baseline and A/A run on one 200 ms server, one run on a 240 ms server, one tiny run."""
    from tests.fixtures.server_proc import start_server_process

    tmp = tmp_path_factory.mktemp("gate")
    out: dict[str, Path] = {}
    server: ServerProcess
    with start_server_process("--ttft-ms", "200", *SERVER_ARGS) as server:
        out["base"] = run_load(tmp / "base", server.url, extra=SHORT)
        out["same"] = run_load(tmp / "same", server.url, report=False, extra=SHORT)
    # a tiny run: the A/A run's first few measured requests (a third load run costs seconds)
    out["tiny"] = tmp / "tiny"
    out["tiny"].mkdir()
    shutil.copy(out["same"] / "run.json", out["tiny"] / "run.json")
    lines = (out["same"] / "requests.jsonl").read_text().splitlines()
    measured = [line for line in lines if not json.loads(line)["warmup"]]
    (out["tiny"] / "requests.jsonl").write_text("\n".join(measured[:5]) + "\n")
    # the slower server through llmload.ci's own launcher (what make ci-gate uses)
    with synthetic_server(240) as url:
        out["slow"] = run_load(tmp / "slow", url, report=False, extra=SHORT)
    return out


@pytest.fixture(scope="module")
def baseline(runs: dict[str, Path]) -> Path:
    path = runs["base"].parent / "baseline.json"
    assert main(["baseline", str(runs["base"]), "--out", str(path)]) == 0
    return path


def gate(run: Path, baseline: Path) -> int:
    return main(["gate", str(run), "--baseline", str(baseline), "--junit", str(run / "j.xml")])


def test_runner_wrote_the_report(runs: dict[str, Path]) -> None:
    summary = json.loads((runs["base"] / "summary.json").read_text())
    stream = summary["phases"]["stream"]
    assert stream["ok"] >= 60 and summary["input"]["warmup_records"] > 0
    assert 180 <= stream["ttft_ms"]["p50"] <= 400  # 200 ms +- 20 ms jitter, plus a busy machine
    assert (runs["base"] / "report.html").stat().st_size > 10_000


STARVED = "inconclusive: the load generator was starved"


def test_same_server_twice_passes(
    runs: dict[str, Path], baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # on a loaded machine the client may be starved; the gate then says so (exit 2), never fails
    code, out = gate(runs["same"], baseline), capsys.readouterr().out
    assert code == 0 or (code == 2 and STARVED in out), out


def test_twenty_percent_slower_server_fails(
    runs: dict[str, Path], baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # ... unless the run's own harness health shows a starved client whose delay covers the
    # excess: then "may have been the harness" is the honest verdict, with the numbers
    code, out = gate(runs["slow"], baseline), capsys.readouterr().out
    assert "regression beyond allowed +10%" in out
    assert code == 1 or (code == 2 and STARVED in out), out


def test_tiny_run_is_inconclusive(
    runs: dict[str, Path], baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gate(runs["tiny"], baseline) == 2
    assert "too few samples" in capsys.readouterr().out


def test_committed_baseline_is_a_ci_gate_baseline() -> None:
    from llmload.ci import BASELINE
    from llmload.reports.baseline import read_baseline

    doc = read_baseline(BASELINE)
    ttft = doc["metrics"]["ttft"]["stream"]
    assert ttft["n"] >= 150 and doc["run"]["label"] == "ci-gate"
