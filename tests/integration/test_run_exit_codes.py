"""--max-error-rate: a run with more failed requests than allowed exits 3.

(Every request failing exits 3 by default: tests/integration/test_loadtests_run.py.)
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def llmload_run(out: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "llmload", "run", "--target", url]
    cmd += ["--users", "2", "--spawn-rate", "10", "--pacing", "0.1s", "--duration", "1.5s"]
    cmd += ["--modes", "stream", "--max-tokens", "4", "--no-report", "--out", str(out)]
    cmd += ["--status-interval", "60", *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def test_max_error_rate_threshold(start_server: Callable[..., Any], tmp_path: Path) -> None:
    server = start_server(ttft_ms=1, itl_ms=1, fail_rate=0.5, seed=3)
    strict = llmload_run(tmp_path / "strict", server.url, "--max-error-rate", "5%")
    assert strict.returncode == 3, strict.stderr[-2000:]
    assert "> --max-error-rate 5.0%" in strict.stderr and "http_5xx" in strict.stderr
    lenient = llmload_run(tmp_path / "lenient", server.url, "--max-error-rate", "0.95")
    assert lenient.returncode == 0, lenient.stderr[-2000:]
    bad = llmload_run(tmp_path / "bad", server.url, "--max-error-rate", "150%")
    assert bad.returncode == 2 and "--max-error-rate" in bad.stderr
