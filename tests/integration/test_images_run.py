"""``llmload run --images``: generated images through each API to the bundled server, whose
synthetic engine charges each image's tokens of prefill; the run's own files read back.

280×280 PNGs are 100 tokens each on the server (one per 28-pixel patch); at 0.5 ms a
prompt token, a request with 2 images reaches its first token 100 ms after one with
none and the same text. The run draws 0 or 2 images per request, so the split by image
count (``ttft_by_images_ms``) has two rows from one run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmload.loadtests.percentile import percentile_of
from tests.fixtures.drive import ROOT, loadtest
from tests.fixtures.loadtests import harness_slack
from tests.fixtures.server_proc import start_server_process

PER_IMAGE, PREFILL_MS = 100, 0.5
RUN = ("--users", "6", "--spawn-rate", "6", "--pacing", "0.5s", "--duration", "5s")
RUN += ("--modes", "stream", "--scenario", "short_qa", "--max-tokens", "8", "--ignore-eos")
RUN += ("--images", "0,2", "--image-size", "280x280")


@pytest.fixture(scope="module")
def server():
    proc = start_server_process(
        "--ttft-ms", "50", "--itl-ms", "5", "--prefill-ms-per-token", str(PREFILL_MS)
    )
    yield proc
    proc.stop()


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses", "anthropic-messages"])
def test_images_cost_their_prefill_and_the_report_splits_ttft(
    server, protocol: str, tmp_path: Path
) -> None:
    out = tmp_path / "images"
    summary = loadtest(out, "--target", server.url, "--protocol", protocol, *RUN)
    recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert recs and all(r["status"] == "ok" for r in recs)
    assert {r["images"] for r in recs} == {0, 2}
    # the server counted each image's tokens in usage (a short_qa text is under 100 tokens)
    assert all(r["prompt_tokens"] > 2 * PER_IMAGE for r in recs if r["images"] == 2)
    assert all(r["prompt_tokens"] < PER_IMAGE for r in recs if r["images"] == 0)
    # and charged their prefill: the server's own TTFT, less the text's share
    extra = [
        r["server_ttft_s"] * 1000 - PREFILL_MS * (r["prompt_tokens"] - PER_IMAGE * r["images"])
        for r in recs
    ]
    two = [e for e, r in zip(extra, recs, strict=True) if r["images"] == 2]
    none = [e for e, r in zip(extra, recs, strict=True) if r["images"] == 0]
    expected = 2 * PER_IMAGE * PREFILL_MS
    slack = harness_slack(json.loads((out / "run.json").read_text()), "stream") * 1000
    assert abs(percentile_of(two, 50) - percentile_of(none, 50) - expected) <= 5 + slack
    phase = summary["phases"]["stream"]
    split = phase["ttft_by_images_ms"]
    assert set(split) == {"0", "2"}
    assert split["0"]["n"] + split["2"]["n"] == phase["ttft_ms"]["n"]
    assert split["2"]["p50"] - split["0"]["p50"] > expected / 2  # the client sees it too
    assert "TTFT by images per request" in (out / "summary.md").read_text()
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["images"] == "0,2"


def test_images_need_a_protocol_with_chat_messages(server, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "llmload", "run", "--target", server.url]
    cmd += ["--protocol", "openai-completions", "--images", "1", "--duration", "2s"]
    cmd += ["--out", str(tmp_path / "x")]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--images" in done.stderr and "sends no chat" in done.stderr


def test_the_context_fit_counts_the_images(tmp_path: Path) -> None:
    # 2 images are 200 of a 512-token context: unless the fit counts them, max_tokens 300
    # fits the text alone and every request is the server's HTTP 400
    with start_server_process("--ttft-ms", "5", "--itl-ms", "1", "--max-context", "512") as s:
        out = tmp_path / "fit"
        loadtest(
            out, "--target", s.url, "--users", "2", "--spawn-rate", "2", "--pacing", "0.2s",
            "--duration", "2s", "--modes", "stream", "--scenario", "short_qa",
            "--max-tokens", "300", "--images", "2", "--image-size", "280x280",
        )  # fmt: skip
    recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert recs and all(r["status"] == "ok" for r in recs)
    assert all(r["prompt_tokens"] + r["output_tokens"] <= 512 for r in recs)
    fit = json.loads((out / "run.json").read_text())["context_fit"]
    assert fit["trimmed"] == fit["checked"] > 0
