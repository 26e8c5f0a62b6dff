"""report.html rendered by real headless Chromium: a PNG, no console messages, charts in the DOM."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from llmload import reports
from tests.fixtures.reports import make_records, write_run

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
]
CHARTS = (
    "chart-ttft-cdf",
    "chart-latency-time",
    "chart-throughput",
    "chart-inflight",
    "chart-itl",
    "chart-errors-time",
    "chart-client-server",
)


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "chromium is missing: run `make system-deps` (scripts/system-deps.sh)"
    return exe


def run_chromium(page: Path, tmp: Path, *action: str) -> subprocess.CompletedProcess[str]:
    """One headless Chromium invocation on ``page`` with its own profile directory."""
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    cmd = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *action, page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


def console_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ":CONSOLE" in ln]


def test_console_detection_works(tmp_path: Path) -> None:
    # control: a page that logs an error must be caught by the same check
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><body><script>console.error("bad-control")</script>')
    proc = run_chromium(page, tmp_path, "--dump-dom")
    assert any("bad-control" in ln for ln in console_lines(proc.stderr))


def test_report_renders_offline_with_all_charts(
    run_factory: Callable[..., Path], tmp_path: Path
) -> None:
    run = run_factory("html", n=120, open_loop=True)
    reports.build_run(run)
    page = run / "report.html"
    html = page.read_text(encoding="utf-8")
    # self-contained: no external resources, no scripts to fail
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html and "url(" not in html and "<script" not in html

    shot = tmp_path / "report.png"
    proc = run_chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1280,2400")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 50_000  # a blank page compresses to a few KB
    assert console_lines(proc.stderr) == []

    dom = run_chromium(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0 and console_lines(dom.stderr) == []
    for chart in CHARTS:
        m = re.search(rf'<figure class="chart" id="{chart}">.*?</figure>', dom.stdout, re.S)
        assert m, f"{chart} missing from the rendered DOM"
        assert "<svg" in m.group(0) and ("<polyline" in m.group(0) or "<circle" in m.group(0))
    headline = dom.stdout.index('class="cards"')
    assert headline < dom.stdout.index('id="chart-ttft-cdf"') < dom.stdout.index("Run metadata")
    assert "REDACTED" in dom.stdout and "secret" not in dom.stdout and "sk-123" not in dom.stdout


@pytest.mark.slow
def test_html_stays_small_for_100k_records(tmp_path: Path) -> None:
    recs = make_records("stream", "stream", 100_000, t_start=1.7e9, tokens=8, error_every=97)
    run = write_run(tmp_path / "big", recs)
    reports.build_run(run)
    size = (run / "report.html").stat().st_size
    assert size < 3 * 2**20, size
