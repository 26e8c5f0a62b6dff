"""Render every dashboard to its committed JSON file, and detect drift."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmload.dashboards import llm_load

#: Where the generated JSON lives (committed; Grafana provisioning mounts it).
JSON_DIR = Path(__file__).resolve().parent / "json"


@dataclass(frozen=True)
class Dashboard:
    """One generated dashboard: its file name and its builder."""

    filename: str
    build: Callable[[], dict[str, Any]]
    phase_tag: str


DASHBOARDS = (Dashboard("llm-load-test.json", llm_load.build, llm_load.PHASE_TAG),)


def render(dashboard: dict[str, Any]) -> str:
    """Stable JSON text: sorted keys, two-space indent, trailing newline."""
    return json.dumps(dashboard, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def build(out_dir: Path = JSON_DIR) -> list[Path]:
    """Write every dashboard's JSON; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for d in DASHBOARDS:
        path = out_dir / d.filename
        path.write_text(render(d.build()), encoding="utf-8")
        written.append(path)
    return written


def drift(out_dir: Path = JSON_DIR) -> list[str]:
    """Files whose committed JSON differs from what the code generates (or is missing)."""
    stale = []
    for d in DASHBOARDS:
        path = out_dir / d.filename
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != render(d.build()):
            stale.append(str(path))
    return stale
