"""Admission (429), cancellation on disconnect, request timeout and injected faults."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

CHAT = "/v1/chat/completions"
LONG = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 500, "ignore_eos": True}


def wait_until(cond, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


def test_429_beyond_queue_and_fifo_admission(start_server):
    srv = start_server(ttft_ms=5, itl_ms=20, max_concurrency=1, max_queue=1)
    short = {**LONG, "max_tokens": 5}
    # the first one generates long enough (~0.4 s) that the client's own delay in queueing
    # the second behind it (polling, a busy machine) is a small part of the wait measured
    long_one = {**LONG, "max_tokens": 20}

    async def scenario():
        async with httpx.AsyncClient(base_url=srv.url, timeout=10) as client:
            first = asyncio.create_task(client.post(CHAT, json=long_one))
            assert await asyncio.to_thread(wait_until, lambda: srv.state.admission.running == 1)
            second = asyncio.create_task(client.post(CHAT, json=short))
            assert await asyncio.to_thread(wait_until, lambda: srv.state.admission.waiting == 1)
            assert srv.metric("llmserve_requests_waiting") == 1
            third = await client.post(CHAT, json=short)
            return await first, await second, third

    a, b, rejected = asyncio.run(scenario())
    assert a.status_code == b.status_code == 200
    assert rejected.status_code == 429
    assert rejected.headers["retry-after"] == "1"
    assert rejected.json()["error"]["type"] == "rate_limit_error"
    # the queued request waited for the first to finish: most of its generation (the
    # second was queued after the first had started, by up to the client's own delay)
    assert b.json()["x_llmload"]["queue_s"] >= 0.5 * (0.005 + 19 * 0.020)
    assert (
        srv.metric("llmserve_requests_total", endpoint=CHAT, stream="false", status="rejected") == 1
    )
    assert srv.metric("llmserve_queue_time_seconds_count", endpoint=CHAT, stream="false") == 2


def test_disconnect_cancels_generation_and_frees_the_slot(start_server):
    srv = start_server(ttft_ms=5, itl_ms=50, max_concurrency=1, max_queue=0)
    with httpx.Client(base_url=srv.url, timeout=10) as client:
        with client.stream("POST", CHAT, json={**LONG, "stream": True}) as r:
            lines = r.iter_lines()  # kept referenced: a collected iterator closes the connection
            for line in lines:
                if '"delta":{"content":"' in line:
                    break
            time.sleep(0.12)  # still connected, still streaming
            assert srv.state.admission.running == 1
            assert srv.engine.running() == 1
        # leaving the block closed the connection mid-stream
        assert wait_until(lambda: srv.state.admission.running == 0, 1.0)
        assert srv.metric("llmserve_requests_running") == 0
        assert wait_until(lambda: srv.engine.running() == 0, 1.0)  # the engine stopped too
        assert wait_until(
            lambda: (
                srv.metric(
                    "llmserve_requests_total", endpoint=CHAT, stream="true", status="cancelled"
                )
                == 1
            )
        )
        # the single slot is free again: a new request is admitted at once
        ok = client.post(CHAT, json={**LONG, "max_tokens": 2})
        assert ok.status_code == 200
        assert ok.json()["x_llmload"]["queue_s"] < 0.05
    tokens = srv.metric("llmserve_output_tokens_total", endpoint=CHAT)
    assert 3 <= tokens < 100  # the cancelled stream stopped early


def test_request_timeout(start_server):
    srv = start_server(ttft_ms=5, itl_ms=100, request_timeout=0.3)
    r = httpx.post(srv.url + CHAT, json={**LONG, "max_tokens": 50}, timeout=10)
    assert r.status_code == 504
    assert r.json()["error"]["type"] == "timeout_error"
    with httpx.stream("POST", srv.url + CHAT, json={**LONG, "stream": True}, timeout=10) as s:
        lines = [ln for ln in s.iter_lines() if ln.startswith("data: ")]
    assert s.status_code == 200
    assert "[DONE]" not in lines[-1]
    assert json.loads(lines[-1][6:])["error"]["type"] == "timeout_error"
    assert 2 <= len(lines) <= 6
    for stream in ("true", "false"):
        assert (
            srv.metric("llmserve_requests_total", endpoint=CHAT, stream=stream, status="timeout")
            == 1
        )
    assert srv.state.admission.running == 0


def test_fail_rate_gives_500(start_server):
    srv = start_server(fail_rate=1.0)
    for stream in (False, True):
        r = httpx.post(srv.url + CHAT, json={**LONG, "stream": stream}, timeout=10)
        assert r.status_code == 500
        assert r.json()["error"]["type"] == "server_error"
    assert srv.metric("llmserve_requests_total", endpoint=CHAT, stream="true", status="error") == 1


def test_disconnect_rate_drops_the_connection(start_server):
    srv = start_server(ttft_ms=1, itl_ms=1, disconnect_rate=1.0)
    for stream in (True, False):
        with pytest.raises(httpx.RemoteProtocolError):
            with httpx.stream(
                "POST",
                srv.url + CHAT,
                json={**LONG, "max_tokens": 20, "stream": stream},
                timeout=10,
            ) as r:
                r.read()  # the body ends before its end: the connection was dropped
    for stream in ("true", "false"):
        labels = {"endpoint": CHAT, "stream": stream, "status": "disconnect"}
        assert wait_until(lambda lb=labels: srv.metric("llmserve_requests_total", **lb) == 1)


def test_malformed_and_stall_faults(start_server):
    srv = start_server(ttft_ms=1, itl_ms=1, malformed_rate=1.0)
    with httpx.stream("POST", srv.url + CHAT, json={**LONG, "max_tokens": 10, "stream": True}) as r:
        data = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    broken = 0
    for d in data[:-1]:
        try:
            json.loads(d)
        except json.JSONDecodeError:
            broken += 1
    assert broken == 1 and data[-1] == "[DONE]"
    stalled = start_server(ttft_ms=1, itl_ms=1, stall_rate=1.0, stall_s=0.3)
    r = httpx.post(stalled.url + CHAT, json={**LONG, "max_tokens": 10}, timeout=10)
    assert r.status_code == 200 and r.json()["x_llmload"]["e2e_s"] >= 0.3
    assert (
        stalled.metric("llmserve_requests_total", endpoint=CHAT, stream="false", status="stall")
        == 1
    )


def test_queued_requests_time_out_or_leave_without_holding_the_queue(start_server):
    srv = start_server(ttft_ms=5, itl_ms=40, max_concurrency=1, max_queue=4, request_timeout=0.4)
    body = {**LONG, "max_tokens": 100}

    async def scenario():
        async with httpx.AsyncClient(base_url=srv.url, timeout=10) as client:
            holder = asyncio.create_task(client.post(CHAT, json=body))
            assert await asyncio.to_thread(wait_until, lambda: srv.state.admission.running == 1)
            queued = asyncio.create_task(client.post(CHAT, json=body))
            leaver = asyncio.create_task(client.post(CHAT, json=body))
            assert await asyncio.to_thread(wait_until, lambda: srv.state.admission.waiting == 2)
            leaver.cancel()  # the client gives up while queued: its connection closes
            assert await asyncio.to_thread(wait_until, lambda: srv.state.admission.waiting == 1)
            return await holder, await queued

    holder, queued = asyncio.run(scenario())
    assert holder.status_code == queued.status_code == 504
    assert queued.json()["error"]["type"] == "timeout_error"
    assert wait_until(lambda: srv.state.admission.running == srv.state.admission.waiting == 0)
    assert (
        srv.metric("llmserve_requests_total", endpoint=CHAT, stream="false", status="timeout") == 2
    )
    assert (
        srv.metric("llmserve_requests_total", endpoint=CHAT, stream="false", status="cancelled")
        == 1
    )
