"""Thin I/O: read a run directory, write ``summary.json``, ``summary.md``, ``report.html``
and, per measured phase, vLLM ``bench serve``'s result JSON (``vllm_bench_<phase>.json``)."""

from __future__ import annotations

import json
from pathlib import Path

from llmload.reports.page.html import render_html
from llmload.reports.page.markdown import render_markdown
from llmload.reports.summary.make import build_summary
from llmload.reports.table.loader import load_run
from llmload.reports.table.schema import Summary
from llmload.reports.table.vllm_bench import phase_results


def build_run(run_dir: Path | str, slo: str | None = None) -> Summary:
    """Write the run's summary.json, summary.md and report.html; return the summary."""
    run = load_run(run_dir)
    summary = build_summary(run, slo)
    out = Path(run_dir)
    _write(out / "summary.json", json.dumps(summary.to_json(), indent=2, ensure_ascii=False) + "\n")
    _write(out / "summary.md", render_markdown(summary))
    _write(out / "report.html", render_html(run, summary))
    for phase, result in phase_results(run.measured, run.meta, summary).items():
        _write(out / f"vllm_bench_{phase}.json", json.dumps(result, indent=2) + "\n")
    return summary


def read_summary(path: Path | str) -> Summary:
    """A ``summary.json`` written earlier, as the typed summary the renderers take."""
    return Summary.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


def _write(path: Path, text: str) -> None:
    """Write atomically so a reader never sees half a report."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
