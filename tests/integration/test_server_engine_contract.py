"""The HTTP layer against a hand-written engine: readiness, input errors, mid-stream
failures, aclose on disconnect and extra gauges -- what any engine plugs into."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator

import httpx

from llmload.target_server.engine import (
    EngineInputError,
    GenerationRequest,
    PreparedRequest,
    TokenPiece,
)

CHAT = "/v1/chat/completions"
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


class ScriptedEngine:
    """Loads when ``release`` is set; ``boom`` prompts fail mid-stream, ``bad`` ones at prepare."""

    name = "scripted"
    model_name = "scripted-1"
    max_context = 100
    max_output_tokens = 50

    def __init__(self) -> None:
        self.release = threading.Event()
        self._ready = False
        self.closed = 0
        self.active = 0

    @property
    def ready(self) -> bool:
        return self._ready

    async def start(self) -> None:
        while not self.release.is_set():
            await asyncio.sleep(0.01)
        self._ready = True

    async def stop(self) -> None:
        self._ready = False

    def prepare(self, request: GenerationRequest) -> PreparedRequest:
        text = (request.messages or [{}])[-1].get("content", "")
        if text == "bad":
            raise EngineInputError("this engine refuses 'bad'", param="messages", code="refused")
        if text == "crash":
            raise RuntimeError("tokenizer bug")
        return PreparedRequest(request=request, prompt_tokens=len(text), payload=text)

    async def _gen(self, prepared: PreparedRequest) -> AsyncIterator[TokenPiece]:
        self.active += 1
        try:
            for i in range(prepared.request.max_tokens):
                await asyncio.sleep(0.01)
                if prepared.payload == "boom" and i == 2:
                    raise RuntimeError("device fell over")
                if prepared.payload == "slow" and i == 1:
                    raise TimeoutError("the engine's own queue timed out")
                last = i == prepared.request.max_tokens - 1
                yield TokenPiece(f" t{i}", finish_reason="length" if last else None)
        finally:
            self.active -= 1
            self.closed += 1

    def generate(self, prepared: PreparedRequest) -> AsyncIterator[TokenPiece]:
        return self._gen(prepared)

    def running(self) -> int:
        return self.active

    def extra_metrics(self) -> dict[str, float]:
        return {"gpu_memory_allocated_bytes": 1234.0}


def test_health_is_503_until_the_engine_is_ready(start_server):
    engine = ScriptedEngine()
    srv = start_server(engine=engine, wait_ready=False)
    r = httpx.get(srv.url + "/health")
    assert r.status_code == 503 and r.json()["status"] == "starting"
    r = httpx.post(srv.url + CHAT, json=BODY)
    assert r.status_code == 503 and r.json()["error"]["type"] == "service_unavailable_error"
    engine.release.set()
    deadline = time.monotonic() + 5
    while httpx.get(srv.url + "/health").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert httpx.get(srv.url + "/v1/models").json()["data"][0]["id"] == "scripted-1"
    assert httpx.post(srv.url + CHAT, json=BODY).status_code == 200


def ready_engine() -> ScriptedEngine:
    engine = ScriptedEngine()
    engine.release.set()
    return engine


def test_engine_input_error_is_400(start_server):
    srv = start_server(engine=ready_engine())
    body = {**BODY, "messages": [{"role": "user", "content": "bad"}]}
    r = httpx.post(srv.url + CHAT, json=body)
    assert r.status_code == 400
    err = r.json()["error"]
    assert (err["param"], err["code"]) == ("messages", "refused")


def test_engine_bug_in_prepare_is_an_openai_500(start_server):
    srv = start_server(engine=ready_engine())
    r = httpx.post(
        srv.url + CHAT, json={**BODY, "messages": [{"role": "user", "content": "crash"}]}
    )
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    assert srv.metric("llmserve_requests_total", endpoint=CHAT, stream="false", status="error") == 1


def test_failure_mid_stream_is_an_error_event(start_server):
    engine = ready_engine()
    srv = start_server(engine=engine)
    body = {**BODY, "messages": [{"role": "user", "content": "boom"}], "stream": True}
    with httpx.stream("POST", srv.url + CHAT, json=body) as r:
        data = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert r.status_code == 200 and "[DONE]" not in data
    assert json.loads(data[-1])["error"]["type"] == "server_error"
    assert len(data) == 1 + 2 + 1  # role, two tokens, the error
    r = httpx.post(srv.url + CHAT, json={**body, "stream": False})
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    assert srv.metric("llmserve_requests_total", endpoint=CHAT, stream="true", status="error") == 1
    assert engine.closed == 2 and engine.active == 0


def test_disconnect_acloses_the_engine_iterator(start_server):
    engine = ready_engine()
    srv = start_server(engine=engine)
    with httpx.Client() as client:
        with client.stream(
            "POST", srv.url + CHAT, json={**BODY, "max_tokens": 50, "stream": True}
        ) as r:
            lines = r.iter_lines()
            next(line for line in lines if '"content":" t' in line)
            assert engine.active == 1
    deadline = time.monotonic() + 2
    while engine.closed == 0:
        assert time.monotonic() < deadline, "the engine iterator was never closed"
        time.sleep(0.01)
    assert engine.active == 0


def test_extra_metrics_become_gauges(start_server):
    srv = start_server(engine=ready_engine())
    text = httpx.get(srv.url + "/metrics").text
    assert "llmserve_gpu_memory_allocated_bytes 1234.0" in text


class BrokenEngine(ScriptedEngine):
    async def start(self) -> None:
        raise RuntimeError("no weights here")


def test_failed_engine_start_is_reported_by_health(start_server):
    srv = start_server(engine=BrokenEngine(), wait_ready=False)
    deadline = time.monotonic() + 5
    while (r := httpx.get(srv.url + "/health")).json()["status"] == "starting":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert r.status_code == 503
    assert r.json() == {"status": "failed", "error": "RuntimeError: no weights here"}


def test_engine_timeout_error_is_an_error_not_a_request_timeout(start_server):
    srv = start_server(engine=ready_engine())
    r = httpx.post(srv.url + CHAT, json={**BODY, "messages": [{"role": "user", "content": "slow"}]})
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    assert srv.metric("llmserve_requests_total", endpoint=CHAT, stream="false", status="error") == 1
