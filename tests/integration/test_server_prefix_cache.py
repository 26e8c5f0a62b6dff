"""The bundled server's prefix cache over HTTP: ``cached_tokens``, the counters, the TTFT."""

from __future__ import annotations

import json

import httpx
from prometheus_client.parser import text_string_to_metric_families

CHAT, COMP = "/v1/chat/completions", "/v1/completions"
SYSTEM = "You are a careful assistant. " * 20  # 580 bytes: 145 tokens + 4 for the role


def counters(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in fam.samples:
            if s.name.startswith("llmserve_prefix_cache"):
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def stream_usage(client: httpx.Client, body: dict) -> dict:
    """The usage chunk and x_llmload timings of one streamed chat request."""
    last = {}
    with client.stream("POST", CHAT, json={**body, "stream": True}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {") and '"usage":{' in line:
                last = json.loads(line[6:])
    return last


def test_cached_tokens_counters_and_ttft_follow_the_arithmetic(start_server):
    srv = start_server(
        ttft_ms=20, itl_ms=1, prefill_ms_per_token=1.0, prefix_cache_blocks=1000, block_size=16
    )
    body = {"max_tokens": 2, "ignore_eos": True, "stream_options": {"include_usage": True}}
    with httpx.Client(base_url=srv.url, timeout=10) as client:
        got = []
        for question in ("what is one plus one?", "and two plus two?"):
            messages = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": question},
            ]
            got.append(stream_usage(client, {**body, "messages": messages}))
        sync = client.post(COMP, json={"prompt": SYSTEM, "max_tokens": 1}).json()
    first, second = (g["usage"] for g in got)
    assert first["prompt_tokens_details"] == {"cached_tokens": 0}
    # system 4 + 145 and the user's 4 role tokens are shared: 153 -> 9 blocks of 16
    assert second["prompt_tokens_details"] == {"cached_tokens": 144}
    # the server's own TTFT: 20 ms + 1 ms per uncached token (never early; the loop's lag late)
    for chunk, cached in zip(got, (0, 144), strict=True):
        expected = 0.020 + 0.001 * (chunk["usage"]["prompt_tokens"] - cached)
        assert expected <= chunk["x_llmload"]["ttft_s"] < expected + 0.05
    assert sync["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}  # no role tokens
    queries = first["prompt_tokens"] + second["prompt_tokens"] + sync["usage"]["prompt_tokens"]
    assert counters(srv.url) == {
        "llmserve_prefix_cache_queries_total": queries,
        "llmserve_prefix_cache_hits_total": 144,
    }


def test_without_a_prefix_cache_usage_has_no_details(start_server):
    srv = start_server(ttft_ms=1, itl_ms=1)
    r = httpx.post(srv.url + COMP, json={"prompt": SYSTEM, "max_tokens": 1}, timeout=10)
    assert "prompt_tokens_details" not in r.json()["usage"]
    assert counters(srv.url) == {}
