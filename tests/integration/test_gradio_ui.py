"""``llmload serve --ui gradio``: the bundled chat UI, load-tested via Gradio's API."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmload.target_server.synthetic import VOCAB
from tests.fixtures.drive import drive, drive_together, loadtest
from tests.fixtures.server_proc import start_server_process

pytest.importorskip("gradio")

TTFT_MS, ITL_MS, MAX_TOKENS = 80, 10, 24


@pytest.fixture(scope="module")
def ui_server() -> Iterator[str]:
    proc = start_server_process(
        "--ui",
        "gradio",
        "--ttft-ms",
        str(TTFT_MS),
        "--itl-ms",
        str(ITL_MS),
        "--max-output-tokens",
        str(MAX_TOKENS),
        env={"GRADIO_ANALYTICS_ENABLED": "False"},
    )
    with proc:
        yield proc.url


def test_ui_page_api_and_openai_endpoint_share_one_server(ui_server: str) -> None:
    page = httpx.get(ui_server + "/ui/", timeout=30)
    assert page.status_code == 200 and "gradio" in page.text.lower()
    info = httpx.get(ui_server + "/ui/gradio_api/info", timeout=30).json()
    assert "/chat" in info["named_endpoints"]
    rec, _ = drive(ui_server, "openai-chat", model="llmload-synthetic", max_tokens=4)
    assert rec.status == "ok" and rec.output_tokens == 4


def test_ui_streams_from_the_engine_with_its_timing(ui_server: str) -> None:
    rec, text = drive(ui_server + "/ui", "gradio")
    assert rec.status == "ok", rec.error
    assert 1 <= (rec.output_tokens or 0) <= MAX_TOKENS
    words = text.split()
    assert words and all(" " + w in VOCAB for w in words)
    assert rec.ttft_s is not None and rec.ttft_s >= TTFT_MS / 1000
    if len(rec.itl_s) >= 3:
        assert 0.5 * ITL_MS / 1000 <= statistics.median(rec.itl_s) < 5 * ITL_MS / 1000


def test_loadtests_run_against_the_ui(ui_server: str, tmp_path: Path) -> None:
    summary = loadtest(
        tmp_path / "run",
        "--target",
        ui_server + "/ui",
        "--protocol",
        "gradio",
        "--modes",
        "stream",
        "--users",
        "3",
        "--spawn-rate",
        "10",
        "--pacing",
        "0.3s",
        "--duration",
        "3s",
    )
    phase = summary["phases"]["stream"]
    assert phase["count"] >= 6 and phase["ok"] == phase["count"], phase["errors"]
    assert phase["ttft_ms"]["p50"] >= TTFT_MS
    assert phase["ttst_ms"]["p50"] > phase["ttft_ms"]["p50"]
    assert phase["diagnostics"] == []


def test_max_concurrency_becomes_the_chat_concurrency_limit(
    start_server: Callable[..., Any],
) -> None:
    # --max-concurrency 1: Gradio's own one-at-a-time queue, as in the seeds' default app
    server = start_server(
        ui="gradio", max_concurrency=1, ttft_ms=TTFT_MS, itl_ms=2, max_output_tokens=4
    )
    records = drive_together(3, server.url + "/ui", "gradio")
    assert all(r.ok for r in records), [r.error for r in records]
    ttfts = sorted(r.ttft_s or 0.0 for r in records)
    for k, ttft in enumerate(ttfts):
        assert ttft >= 0.9 * (k + 1) * TTFT_MS / 1000, ttfts
