"""``/metrics`` counts exactly what was sent, and ``promtool check metrics`` accepts it."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

CHAT, COMP = "/v1/chat/completions", "/v1/completions"


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    r = httpx.get(url + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_metrics_count_what_was_sent(start_server):
    srv = start_server(ttft_ms=5, itl_ms=2)
    n_tokens = {CHAT: [3, 7, 4], COMP: [5, 2]}
    with httpx.Client(base_url=srv.url, timeout=10) as client:
        for n in n_tokens[CHAT]:
            body = {
                "messages": [{"role": "user", "content": "abcdefgh"}],
                "max_tokens": n,
                "ignore_eos": True,
                "stream": True,
            }
            with client.stream("POST", CHAT, json=body) as r:
                events = [ln for ln in r.iter_lines() if '"delta":{"content":"' in ln]
            assert len(events) == n
        for n in n_tokens[COMP]:
            r = client.post(COMP, json={"prompt": "abcd", "max_tokens": n, "ignore_eos": True})
            assert r.json()["usage"]["completion_tokens"] == n
        client.post(COMP, json={"prompt": "x", "max_tokens": 0})
    m = scrape(srv.url)
    chat, comp = {"endpoint": CHAT, "stream": "true"}, {"endpoint": COMP, "stream": "false"}
    assert value(m, "llmserve_requests_total", **chat, status="ok") == 3
    assert value(m, "llmserve_requests_total", **comp, status="ok") == 2
    assert value(m, "llmserve_requests_total", **comp, status="bad_request") == 1
    assert value(m, "llmserve_time_to_first_token_seconds_count", **chat) == 3
    assert value(m, "llmserve_time_to_first_token_seconds_count", **comp) == 2
    assert value(m, "llmserve_inter_token_latency_seconds_count", **chat) == sum(
        n - 1 for n in n_tokens[CHAT]
    )
    assert value(m, "llmserve_inter_token_latency_seconds_count", **comp) == sum(
        n - 1 for n in n_tokens[COMP]
    )
    assert value(m, "llmserve_e2e_request_latency_seconds_count", **chat) == 3
    assert value(m, "llmserve_queue_time_seconds_count", **comp) == 2
    assert value(m, "llmserve_decode_tokens_per_second_count", **chat) == 3
    assert value(m, "llmserve_output_tokens_total", endpoint=CHAT) == sum(n_tokens[CHAT])
    assert value(m, "llmserve_output_tokens_total", endpoint=COMP) == sum(n_tokens[COMP])
    # synthetic tokenizer: ceil(8 bytes / 4) + 4 per message; ceil(4 / 4)
    assert value(m, "llmserve_prompt_tokens_total", endpoint=CHAT) == 3 * 6
    assert value(m, "llmserve_prompt_tokens_total", endpoint=COMP) == 2 * 1
    # TTFT >= the configured 5 ms, and the +Inf bucket holds every observation
    ttft_sum = value(m, "llmserve_time_to_first_token_seconds_sum", **chat)
    assert 3 * 0.005 <= ttft_sum < 3 * 0.5
    assert value(m, "llmserve_time_to_first_token_seconds_bucket", **chat, le="+Inf") == 3
    assert value(m, "llmserve_time_to_first_token_seconds_bucket", **chat, le="0.001") == 0
    assert value(m, "llmserve_requests_running") == 0
    assert value(m, "llmserve_requests_waiting") == 0
    assert value(m, "llmserve_engine_ready") == 1


def test_promtool_check_metrics_is_silent(start_server):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (make system-deps installs it)")
    srv = start_server(ttft_ms=1, itl_ms=1)
    httpx.post(
        srv.url + CHAT,
        json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "stream": True},
    )
    httpx.post(srv.url + COMP, json={"prompt": "x", "max_tokens": 2})
    httpx.post(srv.url + COMP, json={"prompt": "x", "model": "nope"})
    text = httpx.get(srv.url + "/metrics").text
    assert "llmserve_inter_token_latency_seconds_bucket" in text
    res = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip() == "" and res.stderr.strip() == ""


def test_one_structured_log_line_per_request_without_prompt_text(start_server, caplog):
    caplog.set_level(logging.INFO, logger="llmload.target_server.requests")
    srv = start_server(ttft_ms=1, itl_ms=1)
    secret = "my-private-prompt-text"
    httpx.post(srv.url + COMP, json={"prompt": secret, "max_tokens": 3, "ignore_eos": True})
    httpx.post(srv.url + COMP, json={"prompt": secret, "max_tokens": -1})
    lines = [r.getMessage() for r in caplog.records if r.name == "llmload.target_server.requests"]
    assert len(lines) == 2
    ok, bad = (json.loads(line) for line in lines)
    assert (ok["status"], ok["http_status"], ok["output_tokens"]) == ("ok", 200, 3)
    assert ok["ttft_s"] > 0 and ok["e2e_s"] >= ok["ttft_s"] and ok["id"].startswith("cmpl-")
    assert (bad["status"], bad["http_status"]) == ("bad_request", 400)
    assert all(secret not in line for line in lines)
