"""Trust from the evidence that can still reach the numbers: each request's send side.

Reads are stamped by the kernel, so loop lag no longer delays a measured arrival; what
it can still add to a time counted from t0 is the send side (t0 → last byte written).
The trust box and the gate's "starved" rule judge by that, loop lag shown as context.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from llmload.loadtests.measure.adapters import get_adapter
from llmload.loadtests.measure.timing import RecordMeta, StreamTimer
from llmload.loadtests.run.healthlog import LAG_LINE_S, phase_health
from llmload.loadtests.run.sinks import HarnessHealth
from llmload.reports.build import build_run
from llmload.reports.cli import main
from llmload.reports.gate.verdict import FAIL, INCONCLUSIVE, GateConfig, evaluate
from llmload.reports.table.loader import load_run
from llmload.reports.table.trust import GREEN, RED
from tests.fixtures.reports import make_records, write_run

T0 = 1_700_000_000.0
#: a busy neighbour: the client's loop woke 60 ms late in every sample
BUSY = HarnessHealth(cpu_percent=55.0, loop_lag_s=LAG_LINE_S * 3, inflight=4)


def test_the_timer_keeps_when_the_request_was_written() -> None:
    timer = StreamTimer(get_adapter("openai-chat"), 10.0)
    timer.connected(0.0004)
    timer.sent(10.0012)
    timer.headers(10.05, 200)
    timer.feed(b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n', 10.2)
    meta = RecordMeta("r", "stream", "s", "stream", "/v1/chat/completions", 1.0)
    rec = timer.finish(10.3, meta)
    assert rec.send_s == pytest.approx(0.0012) and rec.connect_s == pytest.approx(0.0004)
    unsent = StreamTimer(get_adapter("openai-chat"), 10.0).finish(10.1, meta, status="connect")
    assert unsent.send_s is None


def starved_run(path: Path, send_s: float, ttft_ms: float = 200.0, **kw: Any) -> Path:
    """A stream phase whose harness health says starved (loop lag), each request sent in
    ``send_s``."""
    recs = make_records("stream", "stream", 300, t_start=T0, ttft_ms=ttft_ms, **kw)
    run = write_run(path, [replace(r, send_s=send_s, connect_s=None) for r in recs])
    meta = json.loads((run / "run.json").read_text())
    meta["phases"][0]["health"] = phase_health({"local": [BUSY] * 10})
    (run / "run.json").write_text(json.dumps(meta))
    return run


def harness(run: Path) -> dict[str, Any]:
    trust = build_run(run).trust
    assert trust is not None
    return next(i for i in trust["items"] if i["check"] == "harness health")


def test_trust_box_judges_the_send_side_with_loop_lag_as_context(tmp_path: Path) -> None:
    # loop lag p99 60 ms — "starved" by the lag rule — but every request written in 1 ms
    item = harness(starved_run(tmp_path / "quick", send_s=0.001))
    assert item["level"] == GREEN, item
    assert "send side (t0 → last byte written) p99 1.0 ms over 300 requests" in item["reason"]
    assert "loop lag as context" in item["reason"] and "loop lag p99 60 ms" in item["reason"]
    # the same lag, and each request held 40 ms before its last byte left: > 10 % of TTFT
    item = harness(starved_run(tmp_path / "held", send_s=0.040))
    assert item["level"] == RED and "more than the figures can absorb" in item["reason"]
    summary = json.loads((tmp_path / "held" / "summary.json").read_text())
    assert summary["phases"]["stream"]["send_ms"]["p99"] == pytest.approx(40.0)


@pytest.fixture
def baseline(tmp_path: Path) -> Path:
    base = write_run(tmp_path / "b", make_records("stream", "stream", 300, t_start=T0, seed=1))
    out = tmp_path / "base.json"
    assert main(["baseline", str(base), "--out", str(out)]) == 0
    return out


def test_a_regression_stands_when_the_send_side_cannot_explain_it(
    tmp_path: Path, baseline: Path
) -> None:
    base = json.loads(baseline.read_text())
    slow = starved_run(tmp_path / "slow", send_s=0.001, ttft_ms=240.0, seed=2)
    result = evaluate(load_run(slow), base, GateConfig())
    check = result.checks[0]
    assert check.verdict == FAIL, check.reason
    assert "send side p99 1.0 ms, is less than the" in check.reason
    # each request written 45 ms late: as much as the excess -> the client may have done it
    held = starved_run(tmp_path / "held", send_s=0.045, ttft_ms=240.0, seed=2)
    check = evaluate(load_run(held), base, GateConfig()).checks[0]
    assert check.verdict == INCONCLUSIVE
    assert check.reason.startswith("inconclusive: the load generator's send side")


def test_what_lag_can_still_reach_is_judged_by_lag(tmp_path: Path, baseline: Path) -> None:
    # ITL: a late loop can merge reads, so a starved client still makes an ITL failure doubtful
    base = json.loads(baseline.read_text())
    slow = starved_run(tmp_path / "itl", send_s=0.001, seed=2, itl_ms=26.0)
    check = evaluate(load_run(slow), base, GateConfig(metric="itl")).checks[0]
    assert check.verdict == INCONCLUSIVE and "starved in phase stream" in check.reason
