"""A target under a path prefix behind a real nginx: ``--target http://proxy/llm/v1``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.fixtures.loadtests import run_cli
from tests.fixtures.nginx import NginxProxy

TTFT_MS, ITL_MS, TOKENS = 150, 10, 8


def test_run_through_a_path_prefix_measures_the_real_ttft(
    start_server: Callable[..., Any], nginx_proxy: Callable[..., NginxProxy], tmp_path: Path
) -> None:
    server = start_server(ttft_ms=TTFT_MS, itl_ms=ITL_MS)
    proxy = nginx_proxy(server.url, buffering=False, gzip=False, location="/llm/")
    # only the prefix leads to the server: a client that dropped it would get nginx's 404
    assert httpx.get(proxy.url + "/v1/models").status_code == 404
    assert httpx.get(proxy.url + "/llm/v1/models").status_code == 200

    run = run_cli(
        tmp_path / "run",
        "--target",
        f"{proxy.url}/llm/v1",
        "--users",
        "3",
        "--spawn-rate",
        "10",
        "--pacing",
        "0.3s",
        "--duration",
        "2s",
        "--max-tokens",
        str(TOKENS),
        "--ignore-eos",
    )
    assert run.rc == 0, run.stderr[-2000:]
    records = run.records
    assert {r["mode"] for r in records} == {"sync", "stream"}
    assert all(r["status"] == "ok" for r in records), [r["error"] for r in records]
    assert all(r["output_tokens"] == TOKENS for r in records)
    # every request went through the prefix to the server, once
    total = server.metric(
        "llmserve_requests_total", endpoint="/v1/chat/completions", stream="true", status="ok"
    ) + server.metric(
        "llmserve_requests_total", endpoint="/v1/chat/completions", stream="false", status="ok"
    )
    assert total == len(records) > 10
    streams = [r for r in records if r["mode"] == "stream"]
    for r in streams:
        # the first token left the server after ~TTFT_MS and reached the client through nginx
        # within a few ms (generous bound: a busy machine), never before it left
        server_ttft, ttft = r["server_ttft_s"], r["ttft_s"]
        assert server_ttft is not None and ttft is not None, r
        assert TTFT_MS / 1000 <= server_ttft < TTFT_MS / 1000 + 0.2, r
        assert server_ttft <= ttft < server_ttft + 0.1, r
        assert ttft < r["e2e_s"], r
    # unbuffered: the tokens after the first arrived spread over their ITLs, not in one
    # piece at the end.  The median over the stream: a busy moment can bunch one
    # request's tokens in the client's socket; a buffering proxy bunches every one.
    spans = sorted(r["e2e_s"] - r["ttft_s"] for r in streams)
    assert spans[len(spans) // 2] > 0.5 * (TOKENS - 1) * ITL_MS / 1000, spans
