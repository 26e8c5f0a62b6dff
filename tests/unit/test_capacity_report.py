"""The capacity section of a report, from a run whose run.json carries a capacity block."""

from __future__ import annotations

from pathlib import Path

from llmload.reports.capacity.view import capacity_html, capacity_markdown, capacity_terminal
from llmload.reports.summary.make import build_summary
from llmload.reports.table.loader import Run
from tests.fixtures.reports import make_records

#: three steps: 2 and 4 req/s within p95 TTFT 300 ms, 8 req/s not
STEPS = [("step01-2rps", 2.0, 100.0), ("step02-4rps", 4.0, 180.0), ("step03-8rps", 8.0, 600.0)]


def capacity_run() -> Run:
    records, steps, phases = [], [], []
    for i, (name, load, ttft) in enumerate(STEPS):
        t0 = 1000.0 + 100 * i
        records += make_records(name, "stream", 120, t_start=t0, ttft_ms=ttft, jitter=0.05)
        verdict = "pass" if ttft < 300 else "fail"
        steps.append(
            {
                "phase": name,
                "load": load,
                "why": "test",
                "search_verdict": verdict,
                "starved": [],
                "duration_s": 10.0,
                "scheduled": None,
            }
        )
        phases.append({"name": name, "mode": "stream", "started_at": t0, "ended_at": t0 + 10})
    meta = {
        "run_id": "cap",
        "phases": phases,
        "capacity": {
            "search": "open loop (requests/s)",
            "unit": "req/s",
            "criteria": [{"quantile": 0.95, "bounds_ms": {"ttft": 300.0}}],
            "slo": "ttft_p95=300ms",
            "confidence": 0.95,
            "tolerance": 0.1,
            "budget_s": 600,
            "elapsed_s": 42.0,
            "steps": steps,
            "status": "done",
            "answer": {"lo": 4.0, "hi": 8.0, "estimate": 5.0, "reason": "converged"},
        },
    }
    return Run(path=Path("cap"), meta=meta, records=records)


def test_summary_md_html_and_terminal_carry_the_curve() -> None:
    summary = build_summary(capacity_run(), "ttft=300ms")
    cap = summary.capacity
    assert cap is not None and summary.to_json()["capacity"] == cap
    assert [p["load"] for p in cap["curve"]] == [2.0, 4.0, 8.0]
    assert [p["verdict"] for p in cap["curve"]] == ["pass", "pass", "fail"]
    assert cap["text"].startswith("sustains 5 req/s (between 4 and 8) at p95 TTFT ≤ 300 ms")
    assert "at 8 p95 TTFT is" in cap["text"]
    at8 = cap["curve"][2]
    assert at8["ttft_ms"]["p95"] > 300 and at8["ratio"] > 1
    md = capacity_markdown(summary)
    assert md.startswith("## Capacity") and "sustained (capacity)" in md
    assert "first not sustained" in md
    html = capacity_html(summary)
    assert 'id="chart-capacity-latency"' in html and 'id="chart-capacity-throughput"' in html
    assert html.count("<tr>") == 4  # header + 3 steps
    assert capacity_terminal(summary)[0].startswith("capacity: sustains 5 req/s")


def test_a_plain_run_has_no_capacity_section() -> None:
    run = capacity_run()
    del run.meta["capacity"]
    summary = build_summary(run, None)
    assert summary.capacity is None and summary.to_json()["capacity"] is None
    assert capacity_markdown(summary) == "" and capacity_html(summary) == ""
