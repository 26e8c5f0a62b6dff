"""The web UI's llmload tabs (pure: a sink fed by hand, no web server)."""

from __future__ import annotations

from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.run.sinks import HarnessHealth, WebTab
from llmload.reports.summary.make import phase_stats
from llmload.webui import LiveTab

T = 1_700_000_000.0


def rec(i: int, phase: str, scenario: str, ttft: float | None, status: str = "ok") -> RequestRecord:
    return RequestRecord(
        request_id=f"{phase}{i}",
        phase=phase,
        scenario=scenario,
        mode="stream",
        endpoint="/v1/chat/completions",
        started_at=T + i,
        status=status,
        ttft_s=ttft,
        e2e_s=None if ttft is None else ttft + 0.5,
        tpot_s=None if ttft is None else 0.01,
        itl_s=[] if ttft is None else [0.01] * 9,
        output_tokens=None if ttft is None else 10,
        warmup=phase == "warmup",
    )


def fed() -> tuple[LiveTab, list[RequestRecord]]:
    tab = LiveTab("ttft:150", min_interval=0.0)
    tab.on_phase("warmup", "stream", "start", T)
    tab.on_record(rec(99, "warmup", "a", 0.9))
    tab.on_phase("warmup", "stream", "end", T + 5)
    tab.on_phase("stream", "stream", "start", T + 10)
    recs = [rec(i, "stream", "ab"[i % 2], 0.1 + 0.01 * i) for i in range(10)]
    recs.append(rec(10, "stream", "a", None, status="timeout"))
    for r in recs:
        tab.on_record(r)
    tab.on_phase("stream", "stream", "end", T + 30)
    tab.on_health("local", HarnessHealth(cpu_percent=42.0, loop_lag_s=0.0031, inflight=3))
    return tab, recs


def test_the_tab_holds_the_reports_statistics() -> None:
    tab, recs = fed()
    assert isinstance(tab, WebTab)
    stats = tab.stats()["phases"]["stream"]
    expected = phase_stats(recs, 20.0, {"ttft": 150.0}).to_json()
    for key in ("count", "ok", "errors", "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "slo_met"):
        assert stats[key] == expected[key], key
    assert stats["output_tokens_per_s"] == expected["output_tokens_per_s"] == 100 / 20
    assert set(stats["scenarios"]) == {"a", "b"} and not stats["warmup"]


def test_rows_say_what_the_report_will() -> None:
    tab, _ = fed()
    rows = tab.latency_rows()
    assert [(r["phase"], r["scenario"]) for r in rows][:1] == [
        ("warmup (warm-up: not in the report)", "all")
    ]
    stream = next(r for r in rows if r["phase"] == "stream" and r["scenario"] == "all")
    assert stream["requests"] == "11" and stream["errors"] == "1"
    assert stream["ttft50"] == "145" and stream["itl50"] == "10.0"  # fmt_ms, as the report
    health = tab.health_rows()
    assert {"kind": "errors", "name": "stream: timeout", "value": "1"} in health
    assert any(r["name"] == "local" and "CPU 42%" in r["value"] for r in health)


def test_statistics_are_cached_between_polls() -> None:
    tab, _ = fed()
    tab.min_interval = 60.0
    tab._next = 0.0
    first = tab.stats()
    tab.on_record(rec(50, "stream", "a", 0.2))
    assert tab.stats() is first  # not recomputed within min_interval
    tab.on_phase("sync", "sync", "start", T + 40)  # a phase change shows at the next poll
    assert tab.stats()["phases"]["stream"]["count"] == 12


def test_the_tab_keeps_only_the_latest_records_of_a_long_phase() -> None:
    """An hour of records does not grow the load generator's memory through the tab: it keeps
    the latest ``max_records`` per phase, with the whole phase's counts."""
    tab = LiveTab(min_interval=0.0, max_records=50)
    tab.on_phase("stream", "stream", "start", T)
    recs = [rec(i, "stream", "a", 0.1 + 0.001 * i) for i in range(300)]
    recs += [rec(300 + i, "stream", "a", None, status="timeout") for i in range(7)]
    for r in recs:
        tab.on_record(r)
    assert len(tab.phases["stream"].records) == 50  # bounded
    stats = tab.stats()["phases"]["stream"]
    assert stats["count"] == 307 and stats["errors"] == {"timeout": 7} and stats["ok"] == 300
    assert stats["window"] == {"records": 50, "of": 307}
    latest = [r for r in recs[-50:] if r.ok]
    # latencies and rates are the latest records' (over the time they span)
    assert stats["ttft_ms"] == phase_stats(latest, 1.0, {}).to_json()["ttft_ms"]
    assert "latest 50 of 307" in tab.latency_rows()[0]["phase"]
