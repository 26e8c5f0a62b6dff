"""Pure renderers: compare tables, HTML structure and metadata, cheap import."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from llmload.reports.cli import main
from llmload.reports.draw.charts import log_ticks
from llmload.reports.draw.fmt import fmt_ms
from llmload.reports.page.html import render_html
from llmload.reports.page.two_runs import render_compare_html, render_compare_markdown
from llmload.reports.summary.make import build_summary
from llmload.reports.table.loader import load_run
from tests.fixtures.reports import make_records, write_run

T = 1_700_000_000.0


def test_compare_side_by_side(run_factory: Callable[..., Path], tmp_path: Path, capsys) -> None:
    a, b = run_factory("a", seed=1), run_factory("b", seed=1, ttft_ms=300)
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 0
    md = (out / "compare.md").read_text()
    assert md == capsys.readouterr().out.split("wrote ")[0].rstrip("\n") + "\n"
    # same seed, TTFT scaled by 1.5: the stream phase's TTFT p50 is exactly 50% worse
    row = next(ln for ln in md.splitlines() if ln.startswith("| TTFT p50") and "+50.0%" in ln)
    assert row.endswith("+50.0% worse |")
    assert "## sync" in md and "## stream" in md
    html = (out / "compare.html").read_text()
    assert 'id="chart-compare-ttft"' in html and html.count("<table>") >= 3


def test_compare_with_no_shared_phase(tmp_path: Path) -> None:
    a = build_summary(
        load_run(write_run(tmp_path / "a", make_records("x", "stream", 5, t_start=T)))
    )
    b = build_summary(
        load_run(write_run(tmp_path / "b", make_records("y", "stream", 5, t_start=T)))
    )
    md = render_compare_markdown(a, b)
    assert "share no phase" in md and "x, y" in md


def test_html_structure_and_metadata(run_factory: Callable[..., Path]) -> None:
    run = load_run(run_factory("h", n=40))
    summary = build_summary(run)
    html = render_html(run, summary)
    # headline first: cards, the seeds' table and the per-phase numbers come before any chart
    order = ['class="cards"', "Sync vs streaming", 'id="phases-table"', "Charts", "Run metadata"]
    assert [html.index(k) for k in order] == sorted(html.index(k) for k in order)
    # the metadata table starts with its first row, not an empty header row
    assert "<h2>Run metadata</h2><table><tr><td>target</td>" in html
    assert "<details><summary>config</summary><pre>" in html  # long JSON folded away
    assert len(re.findall(r'<figure class="chart"', html)) == 7
    assert "2023-11-14 22:13:20 UTC" in html  # started_at shown as UTC, not a float
    assert "python -m llmload.loadtests run --api-key REDACTED" in html
    assert "secret" not in html and "sk-123" not in html


def test_compare_html_is_self_contained(run_factory: Callable[..., Path]) -> None:
    ra, rb = load_run(run_factory("a")), load_run(run_factory("b", seed=2))
    html = render_compare_html(ra, build_summary(ra), rb, build_summary(rb))
    assert "<script" not in html and not re.search(r"(src|href)=", html)


def test_wrongly_typed_lines_are_corrupt(tmp_path: Path) -> None:
    good = make_records("stream", "stream", 4, t_start=T)
    wrong = [
        {"ttft_s": "fast"},
        {"itl_s": [0.1, None]},
        {"itl_s": {"0": 0.1}},
        {"tokens_per_event": [1, "2"]},
        {"started_at": None},
        {"phase": 3},
        {"status": None},
        {"output_tokens": True},
        {"turn": "1"},
    ]
    lines = [json.dumps(dict(good[0].to_dict(), **w)) for w in wrong]
    lines.append(json.dumps(dict(good[1].to_dict(), output_tokens=None, turn=2.0)))  # fine
    run = write_run(tmp_path / "t", good, extra_lines=lines)
    loaded = load_run(run)
    assert len(loaded.records) == 5 and loaded.corrupt_lines == list(range(5, 5 + len(wrong)))


def test_import_reports_is_cheap() -> None:
    code = (
        "import sys, llmload.reports; "
        "print([m for m in ('numpy', 'llmload.reports.page.html') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def card_labels(html: str) -> list[str]:
    return re.findall(r'<div class="card[^"]*"><b>[^<]*</b><span>([^<]*)</span>', html)


def test_headline_cards_put_ttst_next_to_ttft(run_factory: Callable[..., Path]) -> None:
    run = load_run(run_factory("c", n=40))
    summary = build_summary(run)
    labels = card_labels(render_html(run, summary))
    i = labels.index("TTFT p50 / p95 · stream")
    assert labels[i - 1] == "TTFT p50 / p95 · sync" and labels[i + 1] == "TTST p50 / p95 · stream"
    tt = summary.phases["stream"].dist("ttst_ms")
    assert f"<b>{fmt_ms(tt.p50)} / {fmt_ms(tt.p95)} ms</b>" in render_html(run, summary)
    # goodput per mode, not pooled: sync TTFT is its whole response, so it misses more often
    slo = next(lb for lb in labels if lb.startswith("met SLO"))
    assert slo.startswith("met SLO · stream / sync (")


def test_open_loop_headline_shows_ttft_from_intended(run_factory: Callable[..., Path]) -> None:
    run = load_run(run_factory("ol", n=40, open_loop=True))
    labels = card_labels(render_html(run, build_summary(run)))
    assert "TTFT from intended send p50 / p95 · stream" in labels


def test_wide_ttft_range_gets_a_log_axis(tmp_path: Path) -> None:
    # sync TTFT (whole response, ~2.2 s) is 11x the stream's 200 ms: a linear axis hides stream
    recs = make_records("sync", "sync", 30, t_start=T, tokens=100, jitter=0.0)
    recs += make_records("stream", "stream", 30, t_start=T + 100, tokens=100, jitter=0.0)
    run = load_run(write_run(tmp_path / "wide", recs))
    html = render_html(run, build_summary(run))
    cdf = re.search(r'<figure class="chart" id="chart-ttft-cdf">.*?</figure>', html, re.S)
    assert cdf and "TTFT (ms, log scale)" in cdf.group(0)
    narrow = load_run(write_run(tmp_path / "narrow", make_records("s", "stream", 30, t_start=T)))
    assert "log scale" not in render_html(narrow, build_summary(narrow))


def test_log_ticks() -> None:
    assert log_ticks(195, 4800) == [100, 200, 500, 1000, 2000, 5000]
    assert log_ticks(1, 1000) == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    assert log_ticks(0.5, 3) == [0.5, 1, 2, 5]
    assert log_ticks(12, 12) == [10, 20]  # never a single tick


def test_data_quality_says_once_what_the_context_limit_cost(tmp_path: Path) -> None:
    from llmload.reports.page.markdown import render_markdown

    fit = {
        "context_limit": 2048,
        "prompt_tokens": "estimate",
        "checked": 140,
        "trimmed": 3,
        "skipped": 20,
    }
    recs = make_records("stream", "stream", 6, t_start=1_700_000_000.0)
    path = write_run(tmp_path / "run", recs, meta={"context_fit": fit})
    md = render_markdown(build_summary(load_run(path)))
    assert md.count("target context length 2048 tokens: 20 of 140 prompts skipped") == 1
    quiet = write_run(
        tmp_path / "quiet", recs, meta={"context_fit": {**fit, "trimmed": 0, "skipped": 0}}
    )
    assert "context length" not in render_markdown(build_summary(load_run(quiet)))
