"""``python -m target_server`` as users run it: env settings, the listening line, the key."""

from __future__ import annotations

import httpx


def test_cli_env_settings_and_single_listening_line(start_server_proc):
    key = "cli-test-key"  # a throwaway value for this loopback-only test server
    proc = start_server_proc(
        "--model-name", "cli-model", "--itl-ms", "1",
        env={"LLMLOAD_API_KEY": key, "LLMLOAD_TTFT_MS": "30", "LLMLOAD_MAX_QUEUE": "3"},
    )  # fmt: skip
    body = {"model": "cli-model", "prompt": "x", "max_tokens": 2}
    assert httpx.post(proc.url + "/v1/completions", json=body).status_code == 401
    r = httpx.post(proc.url + "/v1/completions", json=body,
                   headers={"authorization": f"Bearer {key}"})  # fmt: skip
    assert r.status_code == 200
    assert r.json()["x_llmload"]["ttft_s"] >= 0.030  # LLMLOAD_TTFT_MS took effect
    assert sum("listening on http://" in line for line in proc.log) == 1
    assert all(key not in line for line in proc.log)
    assert proc.stop() is not None and proc.proc.poll() is not None
