"""The ITL check counts a request's gaps as what they are worth, end to end.

``llmload run`` against a bundled synthetic server whose requests each decode at a
speed of their own (``--itl-spread``: a request's gaps are all fast or all slow, as on a
real server where one shares its steps with a long prefill), then ``llmload report
baseline`` and ``llmload report gate --metric itl``: the baseline file keeps the gaps'
design effect, and the gate bootstraps each side with the independent gaps its gaps are
worth — the numbers in gate.json, the words in the verdict, the table of the step summary
and of gate.html.
"""

from __future__ import annotations

import json
from pathlib import Path

from llmload.reports.gate.bootstrap import effective_n
from llmload.reports.gate.sides import RecordsSide
from llmload.reports.table.loader import load_run
from tests.fixtures.gate import run
from tests.fixtures.loadtests import llmload
from tests.fixtures.server_proc import start_server_process


def test_a_requests_own_speed_is_counted_in_the_itl_check(tmp_path: Path) -> None:
    with start_server_process("--ttft-ms", "50", "--itl-ms", "20", "--itl-spread", "0.6") as srv:
        base = run(tmp_path / "base", srv.url)
    again = base  # gated against its own baseline: the file's effects against the records'
    baseline = tmp_path / "baseline.json"
    proc = llmload("report", "baseline", str(base), "--out", str(baseline))
    assert proc.returncode == 0, proc.stderr
    stored = json.loads(baseline.read_text())["metrics"]["itl"]["stream"]
    # a request's gaps fall on one side of the median together: it counts about once, not per
    # gap; near the p95 fewer do (a request's speed close to it straddles it, and a busy
    # machine's timing noise spreads its gaps), but still clearly more than one
    gaps_per_request = stored["n"] / len(load_run(base).measured)
    effects = stored["design_effect"]
    assert effects["50"] > gaps_per_request / 3 > 1 and effects["95"] > 1.5, effects

    summary = tmp_path / "gate.md"
    proc = llmload(
        "report", "gate", str(again), "--baseline", str(baseline), "--metric", "itl",
        "--summary-md", str(summary),
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stdout  # the same records: no change
    check = json.loads((again / "gate.json").read_text())["checks"][0]
    n = check["numbers"]
    assert n["baseline_design_effect"] == stored["design_effect"]["95"]
    own = RecordsSide(load_run(again)).latency("itl", "stream", "all")
    assert own is not None and n["run_design_effect"] == own.design_effect(95.0) > 1
    assert n["run_n_effective"] == effective_n(n["run_n"], n["run_design_effect"]) < n["run_n"]
    assert "gaps move together" in check["reason"] and "independent ones" in check["reason"]
    effective = f"{n['baseline_n_effective']} / {n['run_n_effective']} independent"
    assert effective in summary.read_text()
    assert effective in (again / "gate.html").read_text()
