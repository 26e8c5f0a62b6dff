"""The typed summary (``reports.table.schema``) writes exactly the summary.json it always wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.reports.summary.make import build_summary, phase_stats, sync_vs_stream
from llmload.reports.table.loader import load_run
from llmload.reports.table.schema import MetricStats, PhaseStats, Summary, SyncVsStreamRow
from tests.fixtures.reports import SCENARIOS, make_records, write_run

#: summary.json's phase keys, in order, for a run with every optional block
PHASE_KEYS = [
    "mode",
    "count",
    "ok",
    "errors",
    "error_rate",
    "duration_s",
    "ttft_ms",
    "itl_ms",
    "tpot_ms",
    "e2e_ms",
    "itl_per_token_ms",
    "ttst_ms",
    "headers_ms",
    "output_tokens",
    "decode_tokens_per_s",
    "output_tokens_total",
    "output_tokens_per_s",
    "requests_per_s",
    "goodput_per_s",
    "slo_met",
    "slo_met_rate",
    "schedule_delay_ms",
    "ttft_from_intended_ms",
    "e2e_from_intended_ms",
    "ttft_by_turn_ms",
    "token_count_mismatch",
    "client_minus_server_ttft_ms",
    "server_ttft_ms",
    "server_queue_ms",
]


def test_metric_stats_are_the_type_7_percentiles() -> None:
    s = MetricStats.of([0.004, 0.001, 0.002, 0.003, None, float("nan")], scale=1000.0)
    assert s.n == 4 and s.max == pytest.approx(4.0) and s.mean == pytest.approx(2.5)
    assert s.p50 == pytest.approx(2.5) and s.p90 == pytest.approx(3.7)
    assert MetricStats.of([]).to_json() == dict.fromkeys(
        ["n", "p50", "p90", "p95", "p99", "mean", "max"], None
    ) | {"n": 0}
    assert MetricStats.from_json(s.to_json()) == s


def test_a_phase_keeps_summary_json_keys_and_order(tmp_path: Path) -> None:
    recs = make_records("stream", "stream", 30, t_start=1.7e9, open_loop=True, turns=2)
    stats = phase_stats(recs, 10.0, {"ttft": 600.0})
    doc = stats.to_json()
    assert [k for k in doc if k != "multi_token_events"] == PHASE_KEYS
    assert doc["ttft_ms"] == stats.dists["ttft_ms"].to_json()
    assert json.loads(json.dumps(doc)) == doc


def test_comparison_row_improvement() -> None:
    sync = {"mode": "sync", "count": 3, "ok": 3}
    sync["ttft_ms"] = {"n": 3, "p50": 400.0, "p95": 500.0, "mean": 410.0}
    sync["e2e_ms"] = {"n": 3, "p50": 800.0, "p95": 900.0, "mean": None}
    stream = {"mode": "stream", "count": 4, "ok": 4}
    stream["ttft_ms"] = {"n": 4, "p50": 100.0, "p95": 125.0, "mean": 0.0}
    stream["e2e_ms"] = {"n": 4, "p50": 800.0, "p95": None, "mean": 1.0}
    typed = SyncVsStreamRow.of(PhaseStats.from_json(sync), PhaseStats.from_json(stream))
    assert typed.improvement_pct("ttft_ms", "p50") == pytest.approx(75.0)
    assert typed.value("stream", "e2e_ms", "mean") == 1.0
    row = typed.to_json()
    assert SyncVsStreamRow.from_json(row) == typed
    assert row["sync_count"] == 3 and row["stream_count"] == 4
    assert row["ttft_ms_p50_improvement_pct"] == pytest.approx(75.0)
    assert row["e2e_ms_p50_improvement_pct"] == 0.0
    assert row["e2e_ms_p95_improvement_pct"] is None and row["e2e_ms_mean_improvement_pct"] is None
    assert list(row)[:5] == [
        "sync_count",
        "stream_count",
        "sync_ttft_ms_p50",
        "stream_ttft_ms_p50",
        "ttft_ms_p50_improvement_pct",
    ]


def test_summary_comparison_is_the_typed_one(tmp_path: Path) -> None:
    recs = make_records("sync", "sync", 20, t_start=1.7e9, seed=1)
    recs += make_records("stream", "stream", 20, t_start=1.7e9 + 60, seed=2)
    summary = build_summary(load_run(write_run(tmp_path / "r", recs)))
    typed = sync_vs_stream(summary.phases)
    doc = summary.to_json()
    assert typed is not None and summary.sync_vs_stream == typed
    assert doc["comparison"] == typed.to_json()
    assert set(typed.scenarios) == set(doc["comparison"]["scenarios"]) == {"all", *SCENARIOS}


def test_summary_json_reads_back_to_the_same_bytes(tmp_path: Path) -> None:
    """``from_json`` (compare and ci on earlier runs) loses nothing: same value, same file."""
    recs = make_records("sync", "sync", 20, t_start=1.7e9, seed=1)
    recs += make_records("stream", "stream", 30, t_start=1.7e9 + 60, open_loop=True, turns=2)
    recs += make_records("buffered", "stream", 20, t_start=1.7e9 + 120, buffered=True, tokens=20)
    summary = build_summary(load_run(write_run(tmp_path / "r", recs)), "ttft=500ms")
    text = json.dumps(summary.to_json(), indent=2, ensure_ascii=False)
    back = Summary.from_json(json.loads(text))
    assert back == summary
    assert json.dumps(back.to_json(), indent=2, ensure_ascii=False) == text
    assert back.phases["stream"].scenarios and back.phases["buffered"].diagnostics
    # a block this version does not know is carried through, in place
    doc = json.loads(text)
    doc["phases"]["sync"]["later_block"] = {"x": 1}
    doc["later_top"] = [1]
    assert Summary.from_json(doc).to_json() == doc


def test_an_older_summary_without_newer_distributions_still_renders(tmp_path: Path) -> None:
    from llmload.reports.page.markdown import render_markdown
    from llmload.reports.page.terminal import render_terminal

    recs = make_records("stream", "stream", 20, t_start=1.7e9)
    doc = build_summary(load_run(write_run(tmp_path / "r", recs))).to_json()
    for key in ("ttst_ms", "itl_per_token_ms", "trust", "capacity"):
        doc["phases"]["stream"].pop(key, None)
        doc.pop(key, None)
    old = Summary.from_json(doc)
    assert old.phases["stream"].dist("ttst_ms").n == 0 and old.trust is None
    assert "| **stream** |" in render_markdown(old)
    assert "llmload run" in render_terminal(old)
