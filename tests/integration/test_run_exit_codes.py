"""A run that failed says so in its exit code: 3 when too many measured requests failed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def llmload_run(out: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "llmload", "run", "--target", url, "--model", "x"]
    cmd += ["--users", "2", "--spawn-rate", "10", "--pacing", "0.2s", "--duration", "1.5s"]
    cmd += ["--modes", "stream", "--max-tokens", "4", "--no-report", "--out", str(out)]
    cmd += ["--status-interval", "60", *extra]
    return subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def test_every_request_401_exits_3_and_max_error_rate_can_allow_it(
    start_server: Callable[..., Any], tmp_path: Path
) -> None:
    server = start_server(api_key="not-the-clients-key", ttft_ms=1, itl_ms=1)
    proc = llmload_run(tmp_path / "denied", server.url)
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "every measured request failed" in proc.stderr and "http_4xx" in proc.stderr
    assert (tmp_path / "denied" / "requests.jsonl").stat().st_size > 0  # the records are kept
    allowed = llmload_run(tmp_path / "allowed", server.url, "--max-error-rate", "100%")
    assert allowed.returncode == 0, allowed.stderr[-2000:]


def test_max_error_rate_threshold(start_server: Callable[..., Any], tmp_path: Path) -> None:
    server = start_server(ttft_ms=1, itl_ms=1, fail_rate=0.5, seed=3)
    strict = llmload_run(tmp_path / "strict", server.url, "--max-error-rate", "5%")
    assert strict.returncode == 3, strict.stderr[-2000:]
    assert "> --max-error-rate 5.0%" in strict.stderr
    bad = llmload_run(tmp_path / "bad", server.url, "--max-error-rate", "150%")
    assert bad.returncode == 2 and "--max-error-rate" in bad.stderr
