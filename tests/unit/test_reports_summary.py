"""summary.json from small hand-made runs: counts, exclusions, comparison, goodput, bad input."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.cli import main
from llmload.reports.page.html import render_html
from llmload.reports.page.markdown import render_markdown
from llmload.reports.page.terminal import render_terminal
from llmload.reports.summary.make import build_summary
from llmload.reports.table import diagnostics
from llmload.reports.table.diagnostics import Diagnostic
from llmload.reports.table.loader import RunError, load_run
from llmload.reports.table.schema import Summary
from tests.fixtures.reports import make_records, write_run

T = 1_700_000_000.0


def rec(
    i: int, phase: str, mode: str, ttft: float | None, e2e: float | None, **kw
) -> RequestRecord:
    return RequestRecord(
        request_id=f"{phase}{i}",
        phase=phase,
        scenario=kw.pop("scenario", "short"),
        mode=mode,
        endpoint="/v1/chat/completions",
        started_at=kw.pop("started_at", T + i),
        status=kw.pop("status", "ok"),
        ttft_s=ttft,
        e2e_s=e2e,
        **kw,
    )


def hand_run(tmp_path: Path) -> Path:
    """sync TTFT 1.0/2.0/3.0 s, stream TTFT 0.2/0.4/0.6 s, one timeout, one warm-up."""
    recs = [rec(0, "warmup", "stream", 9.0, 9.5, warmup=True)]
    recs += [rec(i, "sync", "sync", t, t, output_tokens=10) for i, t in enumerate((1.0, 2.0, 3.0))]
    recs.append(rec(3, "sync", "sync", None, None, status="timeout"))
    recs += [
        rec(
            10 + i,
            "stream",
            "stream",
            t,
            t + 1.0,
            output_tokens=11,
            tpot_s=0.1,
            itl_s=[0.1] * 10,
            tokens_per_event=[1] * 9 + [2, 2],
            usage_output_tokens=11,
            client_output_tokens=11 if i else 12,
        )
        for i, t in enumerate((0.2, 0.4, 0.6))
    ]
    run = write_run(tmp_path / "hand", recs)
    meta = json.loads((run / "run.json").read_text())
    for ph in meta["phases"]:  # round phase times: 10 s each
        ph["ended_at"] = ph["started_at"] + 10.0
    (run / "run.json").write_text(json.dumps(meta))
    return run


def test_hand_computed_summary(tmp_path: Path) -> None:
    s = build_summary(load_run(hand_run(tmp_path)), "ttft=500ms,e2e=2s").to_json()
    assert list(s["phases"]) == ["sync", "stream"]  # warm-up left out
    assert s["input"]["warmup_records"] == 1 and s["input"]["records"] == 8
    sync, stream = s["phases"]["sync"], s["phases"]["stream"]
    assert sync["count"] == 4 and sync["ok"] == 3 and sync["errors"] == {"timeout": 1}
    assert sync["error_rate"] == pytest.approx(0.25)
    assert sync["ttft_ms"]["p50"] == pytest.approx(2000.0)
    assert sync["ttft_ms"]["p90"] == pytest.approx(2800.0)  # h = 1.8
    assert sync["ttft_ms"]["mean"] == pytest.approx(2000.0)
    assert sync["requests_per_s"] == pytest.approx(0.4)  # 4 requests / 10 s
    assert sync["output_tokens_per_s"] == pytest.approx(3.0)
    assert sync["goodput_per_s"] == 0.0  # 1 s TTFT misses the 500 ms SLO
    assert stream["ttft_ms"]["p50"] == pytest.approx(400.0)
    assert stream["itl_ms"]["p50"] == pytest.approx(100.0)
    assert stream["itl_per_token_ms"]["max"] == pytest.approx(100.0)
    assert stream["itl_per_token_ms"]["p50"] == pytest.approx(100.0)
    # per record: 8 gaps end 1-token events (100 ms), 2 end 2-token events (50 ms/token)
    assert stream["itl_per_token_ms"]["mean"] == pytest.approx(90.0)
    # 0.2 and 0.4 s meet ttft<=500ms and e2e<=2s; 0.6 s does not
    assert stream["slo_met"] == 2 and stream["goodput_per_s"] == pytest.approx(0.2)
    assert stream["token_count_mismatch"] == {"compared": 3, "mismatched": 1, "rate": 1 / 3}
    row = s["comparison"]["scenarios"]["all"]
    assert row["sync_ttft_ms_p50"] == pytest.approx(2000.0)
    assert row["stream_ttft_ms_p50"] == pytest.approx(400.0)
    assert row["ttft_ms_p50_improvement_pct"] == pytest.approx(80.0)
    assert row["e2e_ms_p50_improvement_pct"] == pytest.approx(30.0)  # 2000 -> 1400
    assert set(s["comparison"]["scenarios"]) == {"all", "short"}
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        assert set(stream[key]) >= {"p50", "p90", "p95", "p99", "mean", "max"}
    assert stream["diagnostics"] == [] and "diagnostics" in s


def test_markdown_has_the_seeds_table(tmp_path: Path) -> None:
    s = build_summary(load_run(hand_run(tmp_path)))
    md = render_markdown(s)
    assert (
        "| all | first 2000 / total 2000 | first 400 / total 1400 | first ↓80%, total ↓30% |" in md
    )
    assert "timeout 1" in md and "1 warm-up" in md
    term = render_terminal(s)
    assert "first ↓80%" in term and "stream" in term


def test_open_loop_turns_and_server_timings(tmp_path: Path) -> None:
    recs = make_records(
        "stream", "stream", 30, t_start=T, open_loop=True, turns=3, ttft_ms=100, jitter=0.0
    )
    summary = build_summary(load_run(write_run(tmp_path / "ol", recs)))
    s = summary.to_json()
    g = s["phases"]["stream"]
    # delays cycle 0, 10, 20 ms: TTFT from the intended send time adds them
    assert g["schedule_delay_ms"]["max"] == pytest.approx(20.0)
    assert g["ttft_from_intended_ms"]["p50"] == pytest.approx(110.0)
    assert set(g["ttft_by_turn_ms"]) == {"0", "1", "2"}
    assert g["client_minus_server_ttft_ms"]["p50"] == pytest.approx(3.0)
    assert s["comparison"] is None
    assert "TTFT per turn" in render_markdown(summary)


def test_corrupt_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    recs = make_records("stream", "stream", 10, t_start=T)
    run = write_run(tmp_path / "c", recs, extra_lines=['{"request_id": "x", trunc', "[1, 2]", "{}"])
    s = build_summary(load_run(run))
    assert s.input.corrupt_lines == 3
    assert s.phases["stream"].count == 10
    assert "corrupt lines skipped in requests.jsonl: 3" in render_markdown(s)


def test_target_is_redacted_again(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "r",
        make_records("stream", "stream", 3, t_start=T),
        meta={"target": "https://bob:hunter2@api.example/v1?token=abc&x=1"},
    )
    s = build_summary(load_run(run)).to_json()
    text = json.dumps(s)
    assert "hunter2" not in text and "token=abc" not in text and "sk-123" not in text
    assert s["run"]["target"] == "https://REDACTED@api.example/v1?token=REDACTED&x=1"


@pytest.mark.parametrize("kind", ["missing", "empty", "all-corrupt", "not-a-dir"])
def test_bad_runs_exit_2_with_a_message(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "bad"
    if kind != "missing":
        run.mkdir()
        (run / "requests.jsonl").write_text({"empty": "", "all-corrupt": "{oops\n"}.get(kind, ""))
    if kind == "not-a-dir":
        run = run / "requests.jsonl"
    assert main(["build", str(run)]) == 2
    err = capsys.readouterr().err
    assert "reports build:" in err and ("empty" in err or "not" in err)
    with pytest.raises(RunError):
        load_run(run)


def test_build_cli_writes_all_outputs(run_factory: Callable[..., Path]) -> None:
    run = run_factory("cli")
    assert main(["build", str(run), "--slo", "ttft=300ms"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["slo_ms"] == {"ttft": 300.0}
    assert (run / "summary.md").read_text().startswith("# llmload run")
    assert (run / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_bad_slo_is_bad_input(run_factory: Callable[..., Path]) -> None:
    assert main(["build", str(run_factory("slo")), "--slo", "ttft=fast"]) == 2


def test_diagnostics_are_called_and_rendered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every phase goes through reports.table.diagnostics.detect; what it finds reaches the Markdown
    calls = []

    def detect(records: list[RequestRecord], mode: str) -> list[Diagnostic]:
        calls.append((len(records), mode))
        return [Diagnostic("proxy_buffering", "Chunks arrive in bursts.", "A proxy buffers.")]

    monkeypatch.setattr(diagnostics, "detect", detect)
    s = build_summary(load_run(hand_run(tmp_path)))
    assert calls == [(4, "sync"), (3, "stream")]
    assert (s.phases["stream"].diagnostics or [])[0]["code"] == "proxy_buffering"
    assert "**`proxy_buffering`** — Chunks arrive in bursts. A proxy buffers." in render_markdown(s)


def test_real_proxy_buffering_diagnostic_is_rendered(tmp_path: Path) -> None:
    recs = make_records("stream", "stream", 20, t_start=T, buffered=True, tokens=20)
    s = build_summary(load_run(write_run(tmp_path / "buf", recs)))
    codes = [d["code"] for d in s.to_json()["phases"]["stream"]["diagnostics"]]
    assert "proxy_buffering" in codes and [d["code"] for d in s.diagnostics] == codes
    md = render_markdown(s)
    assert "**`proxy_buffering`** — " in md and "proxy_buffering off" in md
    assert "proxy_buffering" in render_terminal(s)
    clean = build_summary(
        load_run(write_run(tmp_path / "ok", make_records("stream", "stream", 20, t_start=T)))
    )
    assert all(d["code"] != "proxy_buffering" for d in clean.diagnostics)


def test_missing_run_json_still_reports(tmp_path: Path) -> None:
    run = write_run(tmp_path / "nometa", make_records("stream", "stream", 20, t_start=T))
    (run / "run.json").unlink()
    s = build_summary(load_run(run))
    assert s.input.run_json == "missing or unreadable"
    # phase wall time falls back to the records' span: first start to last end
    recs = make_records("stream", "stream", 20, t_start=T)
    span = max(r.started_at + (r.e2e_s or 0) for r in recs) - T
    assert s.phases["stream"].duration_s == pytest.approx(span)
    assert "run.json: missing or unreadable" in render_markdown(s)


def md_row(md: str, first_cell: str) -> list[str]:
    """The cells of the Markdown table row that starts with ``first_cell``."""
    line = next(ln for ln in md.splitlines() if ln.startswith(f"| {first_cell} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def known_run(tmp_path: Path, n: int = 30) -> Summary:
    """sync + stream, no jitter: stream TTFT 200 ms, TTST 220 ms; sync TTFT 500 ms."""
    recs = make_records("sync", "sync", n, t_start=T, jitter=0.0, scenarios=("a",))
    recs += make_records("stream", "stream", n, t_start=T + 10, jitter=0.0, scenarios=("a",))
    return build_summary(load_run(write_run(tmp_path / "known", recs)))


def test_ttst_sits_next_to_ttft(tmp_path: Path) -> None:
    s = known_run(tmp_path)
    assert s.phases["stream"].dist("ttst_ms").p50 == pytest.approx(220.0)
    md = render_markdown(s)
    header = md_row(md, "phase / scenario")
    i = header.index("TTFT p50 / p95 / p99 (ms)")
    assert header[i + 1] == "TTST p50 / p95 (ms)"
    assert md_row(md, "**stream**")[i : i + 2] == ["200 / 200 / 200", "220 / 220"]
    assert md_row(md, "**sync**")[i : i + 2] == ["500 / 500 / 500", "–"]
    term = render_terminal(s).splitlines()
    head = next(ln for ln in term if "TTFT p50" in ln).split()
    assert head[head.index("TTFT") : head.index("TTFT") + 6] == [
        "TTFT",
        "p50",
        "p95",
        "TTST",
        "p50",
        "p95",
    ]
    stream = next(ln for ln in term if ln.split()[:2] == ["stream", "stream"]).split()
    sync = next(ln for ln in term if ln.split()[:2] == ["sync", "sync"]).split()
    assert stream[4:8] == ["200", "200", "220", "220"] and sync[4:8] == ["500", "500", "–", "–"]


def test_itl_per_token_and_token_truth_are_rendered(tmp_path: Path) -> None:
    recs = make_records("stream", "stream", 30, t_start=T, jitter=0.0, scenarios=("a",))
    # two tokens per event: 20 ms between events is 10 ms per token
    recs = [replace(r, tokens_per_event=[2] * len(r.tokens_per_event)) for r in recs]
    s = build_summary(load_run(write_run(tmp_path / "tok", recs)))
    md = render_markdown(s)
    header = md_row(md, "phase / scenario")
    i = header.index("ITL per event p50 / p95 (ms)")
    assert header[i + 1] == "ITL per token p50 / p95 (ms)"
    assert md_row(md, "**stream**")[i : i + 2] == ["20.0 / 20.0", "10.0 / 10.0"]
    # the fixture's client count is one short on every 10th request: 3 of 30
    assert "server usage vs client token count differ in 3/30 requests (10.0%)" in md
    html = render_html(load_run(tmp_path / "tok"), s)
    assert "<th>ITL per event p50 / p95 (ms)</th><th>ITL per token p50 / p95 (ms)</th>" in html
    assert "<td>20.0 / 20.0</td><td>10.0 / 10.0</td>" in html
    assert "differ in 3 of 30 requests (10.0%)" in html
    # without a client-side count there is nothing to compare: no mismatch line
    bare = [replace(r, client_output_tokens=None) for r in recs]
    s2 = build_summary(load_run(write_run(tmp_path / "bare", bare)))
    assert "token_count_mismatch" not in s2.to_json()["phases"]["stream"]
    assert "token count differ" not in render_markdown(s2)


def test_without_a_tokenizer_usage_above_the_event_count_is_not_called_a_mismatch(
    tmp_path: Path,
) -> None:
    recs = make_records("stream", "stream", 30, t_start=T, jitter=0.0, scenarios=("a",))
    meta = {"config": {"tokenizer": None}}  # the client counted content events
    s = build_summary(load_run(write_run(tmp_path / "ev", recs, meta=meta)))
    stream = s.to_json()["phases"]["stream"]
    assert "token_count_mismatch" not in stream
    assert stream["multi_token_events"] == {"compared": 30, "requests": 3}
    md = render_markdown(s)
    assert "token count differ" not in md
    assert "in 3/30 responses some events carried several tokens" in md
    assert "expected, not a fault" in md
    html = render_html(load_run(tmp_path / "ev"), s)
    assert "differ in" not in html and "Expected, not a fault" in html


def test_the_bundled_servers_speed_check_is_shown_beside_the_data_quality(tmp_path: Path) -> None:
    recs = make_records("stream", "stream", 30, t_start=T, jitter=0.0)
    meta = {
        "bundled_server": {
            "engine": "transformers",
            "speed_tokens_per_s": 2000.0,
            "probe_streams": 20,
            "planned_tokens_per_s": 2400.0,
            "planned_share": 1.2,
        }
    }
    md = render_markdown(build_summary(load_run(write_run(tmp_path / "sp", recs, meta=meta))))
    assert "bundled server (transformers): 2,000 output tokens/s measured before the run" in md
    assert "(120% of it: more than it can serve, so latencies include its queue)" in md
    meta["bundled_server"].update(planned_tokens_per_s=800.0, planned_share=0.4)
    md = render_markdown(build_summary(load_run(write_run(tmp_path / "ok", recs, meta=meta))))
    assert "(40% of it)" in md and "more than it can serve" not in md


def test_open_loop_latency_from_the_intended_send_time_is_rendered(tmp_path: Path) -> None:
    recs = make_records("stream", "stream", 30, t_start=T, open_loop=True, jitter=0.0)
    s = build_summary(load_run(write_run(tmp_path / "ol", recs)))
    md = render_markdown(s)
    assert "## From the intended send time (open loop)" in md and "\n### stream\n" in md
    # delays cycle 0, 10, 20 ms on a 200 ms TTFT
    assert md_row(md, "TTFT from the intended send time")[1:3] == ["210", "220"]
    assert md_row(md, "TTFT from the actual send (as measured)")[1:3] == ["200", "200"]
    assert md_row(md, "schedule delay (intended → actual send)")[1:3] == ["10.0", "20.0"]
    assert "--from-intended" in md
    term = render_terminal(s)
    assert "from the intended send time (open loop, ms):\n  stream     TTFT p50 210 p95 220" in term
    closed = known_run(tmp_path)
    assert "intended" not in render_markdown(closed) + render_terminal(closed)
