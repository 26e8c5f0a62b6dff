"""Real nginx in front of the bundled server: buffering on is flagged, off is not."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmload.reports.table.diagnostics import detect
from tests.fixtures.drive import drive_together, loadtest
from tests.fixtures.nginx import NginxProxy

TTFT_MS, ITL_MS, TOKENS = 60, 20, 16


def _phase(url: str) -> list[Any]:
    recs = drive_together(4, url, "openai-chat", max_tokens=TOKENS, model="llmload-synthetic")
    assert [r.status for r in recs] == ["ok"] * 4, [r.error for r in recs]
    assert all(r.output_tokens == TOKENS for r in recs)
    return recs


def test_nginx_buffering_on_is_flagged_and_off_is_not(
    start_server: Callable[..., Any], nginx_proxy: Callable[..., NginxProxy]
) -> None:
    server = start_server(ttft_ms=TTFT_MS, itl_ms=ITL_MS)
    generation_s = (TTFT_MS + (TOKENS - 1) * ITL_MS) / 1000

    buffered = _phase(nginx_proxy(server.url, buffering=True).url)
    found = detect(buffered, "stream")
    assert [d.code for d in found] == ["proxy_buffering"], [
        (r.ttft_s, r.e2e_s, r.itl_s) for r in buffered
    ]
    assert "proxy_buffering off" in found[0].hint
    # what the user saw: nothing until the whole reply had been generated
    assert all((r.ttft_s or 0) >= 0.9 * generation_s for r in buffered)
    assert found[0].evidence["buffered_requests"] == 4

    streamed = _phase(nginx_proxy(server.url, buffering=False).url)
    assert detect(streamed, "stream") == []
    assert all(
        (r.ttft_s or 1) < (r.e2e_s or 0) - 0.5 * (TOKENS - 1) * ITL_MS / 1000 for r in streamed
    )
    assert all(statistics.median(r.itl_s) > ITL_MS / 1000 / 2 for r in streamed)


def test_loadtests_run_summary_carries_the_diagnostic(
    start_server: Callable[..., Any], nginx_proxy: Callable[..., NginxProxy], tmp_path: Path
) -> None:
    server = start_server(ttft_ms=TTFT_MS, itl_ms=ITL_MS)
    args = (
        "--modes",
        "stream",
        "--users",
        "3",
        "--spawn-rate",
        "10",
        "--pacing",
        "0.2s",
        "--duration",
        "2s",
        "--max-tokens",
        str(TOKENS),
        "--ignore-eos",
    )
    on = nginx_proxy(server.url, buffering=True)
    summary = loadtest(tmp_path / "on", "--target", on.url, *args)
    codes = [d["code"] for d in summary["phases"]["stream"]["diagnostics"]]
    # the client's diagnosis, and the server's side agreeing: its own TTFT is short, the
    # path (nginx holding the stream) added the rest
    assert codes == ["proxy_buffering", "server_path"]
    assert "proxy_buffering" in [d["code"] for d in summary["diagnostics"]]
    assert "proxy_buffering" in (tmp_path / "on" / "summary.md").read_text()

    off = nginx_proxy(server.url, buffering=False)
    summary = loadtest(tmp_path / "off", "--target", off.url, *args)
    assert summary["phases"]["stream"]["ok"] >= 6
    assert summary["phases"]["stream"]["diagnostics"] == []
