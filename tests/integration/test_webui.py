"""``--web``: locust's table counts each request once; the llmload tab shows the report's figures.

Rendered in the real headless Chromium (flags as in test_reports_html); the
screenshot is kept under ``runs/test-artifacts/`` (or ``$LLMLOAD_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from tests.fixtures.loadtests import ROOT, loadtests_cmd
from tests.integration.test_reports_html import CHROMIUM_FLAGS, chromium, console_lines

N = 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _artifacts() -> Path:
    out = Path(os.environ.get("LLMLOAD_TEST_ARTIFACTS") or ROOT / "runs" / "test-artifacts")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _browse(url: str, tmp: Path, *action: str) -> subprocess.CompletedProcess[str]:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    cmd = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *action, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


def test_web_ui_counts_once_and_shows_the_reports_figures(
    start_server_proc, tmp_path: Path
) -> None:
    server = start_server_proc("--ttft-ms", "40", "--itl-ms", "4")
    port = _free_port()
    out = tmp_path / "web"
    # the stream phase's N requests end it; the cooldown holds the UI still while we look
    args = ("--target", server.url, "--num-prompts", str(N), "--max-concurrency", "3")
    args += ("--max-tokens", "16", "--ignore-eos", "--modes", "stream,sync", "--cooldown", "25s")
    proc = subprocess.Popen(
        loadtests_cmd("run", "--out", str(out), *args, "--web", "--web-port", str(port)),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        live: dict = {}
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                live = httpx.get(f"{base}/llmload/stats", timeout=5).json()
                first = live["phases"].get("stream")
                if first and first["count"] == N and "sync" not in live["phases"]:
                    break
            time.sleep(0.5)
        assert live.get("phases", {}).get("stream", {}).get("count") == N, live
        time.sleep(2.5)  # past the tab's cache: the phase end is in
        live = httpx.get(f"{base}/llmload/stats", timeout=5).json()
        table = httpx.get(f"{base}/stats/requests", timeout=5).json()

        # locust's own table: one entry per scenario, one count per request
        entries = [e for e in table["stats"] if e["name"] != "Aggregated"]
        total = next(e for e in table["stats"] if e["name"] == "Aggregated")
        assert total["num_requests"] == N == sum(e["num_requests"] for e in entries)
        assert {e["method"] for e in entries} == {"stream"}
        tabs = {t["key"]: t["data"] for t in table["extended_stats"]}
        rows = [r for r in tabs["llmload"] if r["scenario"] == "all"]
        assert [(r["phase"], r["requests"]) for r in rows] == [("stream", str(N))]
        assert all(r["itl50"] != "–" and r["tpot50"] != "–" for r in rows)
        assert any(r["kind"] == "harness" for r in tabs["llmload-health"])

        shot = _artifacts() / "webui-llmload-tab.png"
        page = f"{base}/?tab=llmload"
        budget = "--virtual-time-budget=6000"
        snap = _browse(page, tmp_path, budget, f"--screenshot={shot}", "--window-size=1600,900")
        assert snap.returncode == 0, snap.stderr[-2000:]
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
        dom = _browse(page, tmp_path, budget, "--dump-dom")
        assert dom.returncode == 0 and console_lines(dom.stderr) == [], dom.stderr[-2000:]
        assert "TTFT p99" in dom.stdout and "Output tok/s" in dom.stdout
        assert rows[0]["ttft50"] in dom.stdout
        shutil.copy(shot, tmp_path / shot.name)
    finally:
        # what the cooldown held still has been looked at: Ctrl-C ends the run there (the
        # sync phase after it is only what makes a cooldown), files and report still written
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=90)
    assert proc.returncode in (0, 130), stderr  # 130: interrupted in the cooldown, as asked

    # the figures the tab showed are the report's, exactly (same function, same records)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    shown, report = live["phases"]["stream"], summary["phases"]["stream"]
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "ttst_ms", "output_tokens_per_s"):
        assert shown[key] == report[key], key
    assert shown["scenarios"].keys() == report["scenarios"].keys()
