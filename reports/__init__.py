"""llmload reports: statistics, sync-vs-stream tables, HTML/Markdown/JSON/JUnit output, the CI gate.

The runner calls ``build_run(run_dir, slo)`` at the end of a run and prints
``render_terminal(summary)``.  Imports are lazy so ``import llmload.reports`` stays cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmload.reports.table.schema import Summary

if __name__ != "llmload.reports":  # one module object per module: never a second spelling
    raise ImportError(f"{__name__} installs as llmload.reports: import that, not {__name__}")

__all__ = ["build_run", "render_terminal"]


def build_run(run_dir: Path | str, slo: str | None = None) -> Summary:
    """Write summary.json, summary.md and report.html into ``run_dir``; return the summary."""
    from llmload.reports.build import build_run as _build

    return _build(run_dir, slo)


def render_terminal(summary: Summary) -> str:
    """The compact end-of-run text for a summary (pure)."""
    from llmload.reports.page.terminal import render_terminal as _render

    return _render(summary)
