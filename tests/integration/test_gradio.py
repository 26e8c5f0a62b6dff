"""The Gradio adapter against real ``gr.ChatInterface`` apps started in this process.

The fns follow the seeds' ``predict_stream``: a prefill delay, then one token
per known delay, yielded cumulatively as Gradio expects.  ``chat`` and
``chat_sync`` run with ``concurrency_limit=None`` (the seeds' fix); ``chat_queued``
keeps Gradio's default ``concurrency_limit=1``, so concurrent users queue.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llmload.loadtests.workload import tokencount
from llmload.reports.summary.make import phase_stats
from llmload.reports.table.diagnostics import detect
from tests.fixtures.drive import ROOT, drive, drive_together, loadtest
from tests.fixtures.nginx import NginxProxy
from tests.fixtures.tokenizer import train_tokenizer

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
gr = pytest.importorskip("gradio")

TOKENS = [f" tok{i}" for i in range(12)]
REPLY = "".join(TOKENS)
FIRST_S = 0.15
TOKEN_S = 0.03
GENERATION_S = FIRST_S + (len(TOKENS) - 1) * TOKEN_S


def predict_stream(message: str, history: list[Any]) -> Iterator[str]:
    """Prefill, then one token every TOKEN_S; the reply so far each time."""
    time.sleep(FIRST_S)
    reply = ""
    for i, token in enumerate(TOKENS):
        if i:
            time.sleep(TOKEN_S)
        reply += token
        yield reply


def predict(message: str, history: list[Any]) -> str:
    """The blocking variant: the whole reply after the whole generation time."""
    time.sleep(GENERATION_S)
    return REPLY


def predict_error(message: str, history: list[Any]) -> Iterator[str]:
    yield "partial"
    raise gr.Error("the model is overloaded")


def count_turns(message: str, history: list[dict[str, Any]]) -> str:
    """Echoes what the app received: the history's roles and the new message."""
    roles = ",".join(str(m["role"]) for m in history)
    return f"history={roles} message={message}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def gradio_url() -> Iterator[str]:
    with gr.Blocks(analytics_enabled=False) as demo:
        gr.ChatInterface(predict_stream, api_name="chat", concurrency_limit=None)
        gr.ChatInterface(predict, api_name="chat_sync", concurrency_limit=None)
        gr.ChatInterface(predict_stream, api_name="chat_queued")
        gr.ChatInterface(predict_error, api_name="chat_error", concurrency_limit=None)
        gr.ChatInterface(count_turns, api_name="chat_turns", concurrency_limit=None)
        # a Blocks app whose history is an explicit input, not ChatInterface's session State
        message, history, reply = gr.Textbox(), gr.JSON(), gr.Textbox()
        gr.Button().click(count_turns, [message, history], reply, api_name="turns_json")
    demo.launch(
        prevent_thread_lock=True,
        server_name="127.0.0.1",
        server_port=_free_port(),
        quiet=True,
        show_error=True,
    )
    try:
        yield demo.local_url.rstrip("/")
    finally:
        demo.close()


def test_streaming_ttft_tokens_and_gaps_match_the_known_delays(gradio_url: str) -> None:
    rec, text = drive(gradio_url, "gradio", options={"api_name": "chat"})
    assert rec.status == "ok", rec.error
    assert text == REPLY
    assert rec.endpoint == "/gradio_api/call/chat"
    assert rec.output_tokens == len(TOKENS) and rec.token_source == "events"
    assert rec.ttft_s is not None and rec.ttst_s is not None and rec.e2e_s is not None
    assert FIRST_S <= rec.ttft_s < FIRST_S + 0.5
    # the first token came long before the end: the reply was really streamed
    assert rec.ttft_s < rec.e2e_s - 0.5 * (len(TOKENS) - 1) * TOKEN_S
    assert rec.ttst_s - rec.ttft_s >= 0.5 * TOKEN_S
    assert rec.e2e_s >= GENERATION_S
    assert len(rec.itl_s) == len(TOKENS) - 1
    assert 0.5 * TOKEN_S <= statistics.median(rec.itl_s) < 4 * TOKEN_S


def test_sync_mode_sees_nothing_until_the_end(gradio_url: str) -> None:
    rec, text = drive(gradio_url, "gradio", mode="sync", options={"api_name": "chat"})
    assert rec.status == "ok", rec.error
    assert text == REPLY
    assert rec.ttft_s is not None and rec.e2e_s is not None
    assert rec.ttft_s >= GENERATION_S and rec.ttft_s == pytest.approx(rec.e2e_s, abs=0.01)


def test_non_streaming_fn_is_one_content_event(gradio_url: str) -> None:
    rec, text = drive(gradio_url, "gradio", options={"api_name": "chat_sync"})
    assert rec.status == "ok", rec.error
    assert text == REPLY and rec.output_tokens == 1 and rec.itl_s == []
    assert rec.ttft_s is not None and rec.ttft_s >= GENERATION_S


def test_tokenizer_counts_the_gradio_reply(gradio_url: str, tmp_path: Path) -> None:
    counter = tokencount.load(train_tokenizer(tmp_path))
    rec, text = drive(gradio_url, "gradio", options={"api_name": "chat"}, tokenizer=counter)
    assert rec.status == "ok", rec.error
    assert rec.token_source == "tokenizer"
    assert rec.output_tokens == rec.client_output_tokens == counter.count(REPLY)
    assert sum(rec.tokens_per_event) >= len(TOKENS)


def test_a_conversation_reaches_the_app_as_message_and_history(gradio_url: str) -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "写一首诗"},
        {"role": "assistant", "content": "春眠不觉晓"},
        {"role": "user", "content": "再来一首"},
    ]
    rec, text = drive(gradio_url, "gradio", options={"api_name": "turns_json"}, messages=messages)
    assert rec.status == "ok", rec.error
    assert text == "history=user,assistant message=再来一首"
    # ChatInterface keeps history in per-session State, which the HTTP API cannot set:
    # every call is a fresh conversation that receives the last user message
    rec, text = drive(gradio_url, "gradio", options={"api_name": "chat_turns"}, messages=messages)
    assert rec.status == "ok", rec.error
    assert text == "history= message=再来一首"


def test_gradio_error_event_is_recorded_as_protocol(gradio_url: str) -> None:
    rec, _ = drive(gradio_url, "gradio", options={"api_name": "chat_error"})
    assert rec.status == "protocol"
    assert rec.error is not None and "overloaded" in rec.error


def test_unknown_api_name_is_an_http_error(gradio_url: str) -> None:
    # the first step fails (Gradio 6 answers 500 for an unknown api_name); no stream is read
    rec, _ = drive(gradio_url, "gradio", options={"api_name": "no_such_fn"})
    assert rec.status in ("http_4xx", "http_5xx"), rec.error
    assert rec.http_status is not None and rec.http_status >= 400 and rec.ttft_s is None


def test_default_concurrency_limit_queues_users(gradio_url: str) -> None:
    users = 4
    free = drive_together(users, gradio_url, "gradio", options={"api_name": "chat"})
    queued = drive_together(users, gradio_url, "gradio", options={"api_name": "chat_queued"})
    assert all(r.ok for r in free + queued), [r.error for r in free + queued]
    free_ttft = sorted(r.ttft_s or 0.0 for r in free)
    queued_ttft = sorted(r.ttft_s or 0.0 for r in queued)
    # unlimited: the users run side by side, nobody waits for another's generation
    assert free_ttft[-1] - free_ttft[0] < GENERATION_S, free_ttft
    # one at a time: the k-th user waits for k whole generations before its first token
    for k, ttft in enumerate(queued_ttft):
        assert ttft >= FIRST_S + 0.8 * k * GENERATION_S, queued_ttft
    # and the report's numbers show it: its percentiles carry at least the queue's own waits
    # (bounds from the queue, not from the free users' TTFT: on a loaded machine four
    # users side by side took 0.73 s where one alone takes 0.15, and load only adds)
    free_ms = phase_stats(free, 1.0, {}).dist("ttft_ms")
    queued_ms = phase_stats(queued, 1.0, {}).dist("ttft_ms")
    assert free_ms.p50 is not None and free_ms.max is not None, free_ms
    wait_ms = 0.8 * GENERATION_S * 1000  # one whole generation, less a margin
    assert (queued_ms.p50 or 0.0) >= FIRST_S * 1000 + 1.5 * wait_ms, (free_ms, queued_ms)
    assert (queued_ms.max or 0.0) >= FIRST_S * 1000 + 3 * wait_ms, (free_ms, queued_ms)


def test_loadtests_run_report_shows_gradio_queueing(gradio_url: str, tmp_path: Path) -> None:
    args = (
        "--target",
        gradio_url,
        "--protocol",
        "gradio",
        "--modes",
        "stream",
        "--users",
        "3",
        "--spawn-rate",
        "20",
        "--pacing",
        "0s",
        "--duration",
        "2s",
    )
    free = loadtest(tmp_path / "free", *args, "--api-name", "chat")["phases"]["stream"]
    queued = loadtest(tmp_path / "queued", *args, "--api-name", "chat_queued")["phases"]["stream"]
    assert free["errors"] == {} and queued["errors"] == {}
    assert free["ttft_ms"]["p50"] < (FIRST_S + GENERATION_S) * 1000
    # three users behind concurrency_limit=1: a request waits for about two others
    assert queued["ttft_ms"]["p50"] > FIRST_S * 1000 + 1.2 * GENERATION_S * 1000
    assert queued["requests_per_s"] < free["requests_per_s"]


def test_gradio_behind_buffering_nginx_is_flagged(
    gradio_url: str, nginx_proxy: Callable[..., NginxProxy]
) -> None:
    # the seeds' deployment: nginx in front of the Gradio app; Gradio reports no server
    # timings, so the detector judges from client data alone (TTFT close to e2e, bursts)
    on = drive_together(3, nginx_proxy(gradio_url, buffering=True).url, "gradio")
    assert all(r.ok for r in on), [r.error for r in on]
    assert all(r.output_tokens == len(TOKENS) for r in on)
    assert [d.code for d in detect(on, "stream")] == ["proxy_buffering"]
    off = drive_together(3, nginx_proxy(gradio_url, buffering=False).url, "gradio")
    assert all(r.ok for r in off), [r.error for r in off]
    assert detect(off, "stream") == []


@pytest.fixture(scope="module")
def predict_stream_url() -> Iterator[str]:
    """A Gradio 6 app as the seeds write it: ``ChatInterface(fn=predict_stream)``, no api_name."""
    demo = gr.ChatInterface(predict_stream, concurrency_limit=None)
    demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=_free_port(), quiet=True
    )
    try:
        yield demo.local_url.rstrip("/")
    finally:
        demo.close()


def _records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_without_api_name_the_chat_endpoint_is_read_from_the_app(
    predict_stream_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    summary = loadtest(
        out,
        "--target",
        predict_stream_url,
        "--protocol",
        "gradio",
        "--modes",
        "stream,sync",
        "--users",
        "2",
        "--pacing",
        "0s",
        "--duration",
        "2s",
    )
    for name in ("stream", "sync"):
        phase = summary["phases"][name]
        assert phase["count"] > 0 and phase["errors"] == {}, phase["errors"]
    endpoints = {r["endpoint"] for r in _records(out)}
    # Gradio 6: the named-parameter call form
    assert endpoints == {"/gradio_api/call/v2/predict_stream"}


def test_a_wrong_api_name_stops_at_start_up_listing_the_endpoints(
    predict_stream_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "llmload.loadtests",
        "run",
        "--out",
        str(out),
        "--target",
        predict_stream_url,
        "--protocol",
        "gradio",
        "--api-name",
        "chat",
        "--duration",
        "2s",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "no API endpoint /chat; its endpoints: /predict_stream" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (out / "requests.jsonl").exists()  # no run of 100 % errors


def test_both_call_forms_reach_the_same_fn(predict_stream_url: str) -> None:
    from llmload.loadtests.measure.adapters.gradio import GradioEndpoint

    endpoint = GradioEndpoint("predict_stream", ("message",), ("message",))
    for v2 in (False, True):
        rec, text = drive(predict_stream_url, "gradio", options=endpoint.options(v2))
        assert rec.status == "ok", rec.error
        assert text == REPLY and rec.output_tokens == len(TOKENS)
        assert rec.endpoint.endswith("/v2/predict_stream") == v2
