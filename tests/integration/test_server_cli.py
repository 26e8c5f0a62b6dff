"""``llmload serve`` as users run it: env settings, the listening line, the key."""

from __future__ import annotations

import socket
import subprocess
import sys

import httpx


def test_cli_env_settings_and_single_listening_line(start_server_proc):
    key = "cli-test-key"  # a throwaway value for this loopback-only test server
    proc = start_server_proc(
        "--model-name",
        "cli-model",
        "--itl-ms",
        "1",
        env={"LLMLOAD_API_KEY": key, "LLMLOAD_TTFT_MS": "30", "LLMLOAD_MAX_QUEUE": "3"},
    )
    body = {"model": "cli-model", "prompt": "x", "max_tokens": 2}
    assert httpx.post(proc.url + "/v1/completions", json=body).status_code == 401
    r = httpx.post(
        proc.url + "/v1/completions", json=body, headers={"authorization": f"Bearer {key}"}
    )
    assert r.status_code == 200
    assert r.json()["x_llmload"]["ttft_s"] >= 0.030  # LLMLOAD_TTFT_MS took effect
    assert sum("listening on http://" in line for line in proc.log) == 1
    assert all(key not in line for line in proc.log)
    assert proc.stop() is not None and proc.proc.poll() is not None


def test_cli_startup_error_is_one_line_and_exit_1():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        res = subprocess.run(
            [sys.executable, "-m", "llmload.target_server", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert res.returncode == 1
    assert "target_server: error: " in res.stderr and "Traceback" not in res.stderr
