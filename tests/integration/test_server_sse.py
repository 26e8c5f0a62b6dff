"""The SSE and JSON wire format of the bundled server, over real HTTP on loopback."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from llmload.target_server.pacer import DEFAULT_TICK_S
from llmload.target_server.synthetic import VOCAB

CHAT_BODY = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 5}
COMPLETION_BODY = {"prompt": "hello there", "max_tokens": 5}


def sse_events(url: str, path: str, body: dict) -> tuple[httpx.Response, list[str], list[float]]:
    """POST a streaming request; return the response, the data payloads and their arrival times."""
    payloads, times = [], []
    with httpx.Client(timeout=10) as client, client.stream("POST", url + path, json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                payloads.append(line[6:])
                times.append(time.perf_counter())
    return r, payloads, times


@pytest.mark.parametrize("usage", [False, True])
def test_chat_stream_sequence(start_server, usage):
    srv = start_server(ttft_ms=20, itl_ms=5)
    body = {**CHAT_BODY, "stream": True, "ignore_eos": True}
    if usage:
        body["stream_options"] = {"include_usage": True}
    r, payloads, _ = sse_events(srv.url, "/v1/chat/completions", body)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-cache"
    assert r.headers["x-accel-buffering"] == "no"
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = chunks[1:6]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert [bool(c["choices"][0]["delta"]["content"]) for c in content] == [True] * 5
    finish = chunks[6]
    assert finish["choices"][0]["finish_reason"] == "length"
    assert finish["choices"][0]["delta"] == {}
    last = chunks[-1]
    if usage:
        assert len(chunks) == 8
        assert last["choices"] == []
        assert last["usage"]["completion_tokens"] == 5
        assert last["usage"]["total_tokens"] == last["usage"]["prompt_tokens"] + 5
        assert all(c["usage"] is None for c in chunks[:-1])
        assert "x_llmload" not in finish
    else:
        assert len(chunks) == 7
        assert "usage" not in last
    x = last["x_llmload"]
    assert 0 <= x["queue_s"] <= x["ttft_s"] <= x["e2e_s"]
    assert x["ttft_s"] >= 0.020


def test_completions_stream_sequence(start_server):
    srv = start_server(ttft_ms=10, itl_ms=5)
    body = {**COMPLETION_BODY, "stream": True, "ignore_eos": True}
    r, payloads, _ = sse_events(srv.url, "/v1/completions", body)
    assert r.status_code == 200
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert len(chunks) == 6
    assert all(c["object"] == "text_completion" for c in chunks)
    assert all(c["choices"][0]["text"] for c in chunks[:5])
    assert chunks[5]["choices"][0] == {
        "index": 0,
        "logprobs": None,
        "finish_reason": "length",
        "text": "",
    }
    assert chunks[5]["x_llmload"]["ttft_s"] >= 0.010


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_non_stream_body(start_server, path):
    srv = start_server(ttft_ms=10, itl_ms=2)
    body = dict(CHAT_BODY if "chat" in path else COMPLETION_BODY, ignore_eos=True)
    r = httpx.post(srv.url + path, json=body, timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    obj = r.json()
    choice = obj["choices"][0]
    text = choice["message"]["content"] if "chat" in path else choice["text"]
    assert obj["object"] == ("chat.completion" if "chat" in path else "text_completion")
    assert len(text.split()) == 5
    assert choice["finish_reason"] == "length"
    assert obj["usage"]["completion_tokens"] == 5
    x = obj["x_llmload"]
    # decode runs from the first token on: 4 more tokens 2 ms apart.  The engine's pacer puts
    # a later token on the nearest tick (half a tick early at most) and returns when the loop's
    # timer fires, which uvloop may do up to ~1 ms early (target_server.pacer)
    early = DEFAULT_TICK_S / 2 + 0.001
    assert x["ttft_s"] >= 0.010 and x["e2e_s"] >= x["ttft_s"] + 4 * 0.002 - early


def test_events_are_spaced_by_itl(start_server):
    itl, n = 0.02, 12
    srv = start_server(ttft_ms=30, itl_ms=itl * 1000)
    body = {**CHAT_BODY, "max_tokens": n, "ignore_eos": True, "stream": True}
    _, payloads, times = sse_events(srv.url, "/v1/chat/completions", body)
    content_times = [
        t
        for p, t in zip(payloads, times, strict=True)
        if p != "[DONE]"
        and json.loads(p)["choices"]
        and json.loads(p)["choices"][0]["delta"].get("content")
    ]
    assert len(content_times) == n
    assert content_times[-1] - content_times[0] >= 0.8 * (n - 1) * itl


def test_openai_sdk_stream_and_not(start_server):
    srv = start_server(ttft_ms=5, itl_ms=1, model_name="tiny-test")
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list()] == ["tiny-test"]
    full = client.chat.completions.create(
        model="tiny-test",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        extra_body={"ignore_eos": True},
    )
    assert full.choices[0].finish_reason == "length"
    assert full.usage is not None and full.usage.completion_tokens == 4
    stream = client.chat.completions.create(
        model="tiny-test",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 4
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
    comp = client.completions.create(model="tiny-test", prompt="hi", max_tokens=3, stream=True)
    assert sum(1 for c in comp if c.choices and c.choices[0].text) >= 1


def test_subprocess_server_reports_its_port(start_server_proc):
    proc = start_server_proc("--ttft-ms", "1", "--itl-ms", "1", "--model-name", "sub")
    r = httpx.get(proc.url + "/v1/models", timeout=5)
    assert r.status_code == 200 and r.json()["data"][0]["id"] == "sub"
    assert proc.url.startswith("http://127.0.0.1:") and not proc.url.endswith(":0")


def test_a_reader_that_pauses_still_gets_every_event_in_order(start_server, monkeypatch):
    """The pacer's tick writes a stream's events only while its connection takes them: once
    a client stops reading and the server's writes pause, the rest goes out through the
    request's task (which waits for the client), and the client still gets every event,
    in order, then the finish event and ``[DONE]``."""
    import socket

    from bench.server_abuse import dechunk, open_streams, read_to_eof
    from llmload.target_server.write_deadline import ChunkWriter

    refused = []
    init, write = ChunkWriter.__init__, ChunkWriter.write

    def small_buffer(self, cycle):  # a small kernel send buffer: the writes pause early
        init(self, cycle)
        cycle.transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDBUF, 8192
        )

    def counting(self, body):
        ok = write(self, body)
        if not ok:
            refused.append(1)
        return ok

    monkeypatch.setattr(ChunkWriter, "__init__", small_buffer)
    monkeypatch.setattr(ChunkWriter, "write", counting)
    tokens = 3000  # ~0.5 MB of events: more than the socket buffers and the write buffer hold
    srv = start_server(ttft_ms=0, itl_ms=0, max_output_tokens=tokens)
    [(sock, already)] = open_streams(srv.url, 1, tokens, rcvbuf=16384)
    try:
        time.sleep(0.3)  # not reading: the server's writes pause
        _head, body = dechunk(already + read_to_eof(sock, timeout=30, already=already))
    finally:
        sock.close()
    events = [e[len(b"data: ") :] for e in body.split(b"\n\n") if e.strip()]
    assert events[-1] == b"[DONE]"
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
    texts = [json.loads(e)["choices"][0]["delta"].get("content") for e in events[:-2]]
    texts = [t for t in texts if t]  # the role event has none
    assert len(texts) == tokens and refused  # every event, and the tick did hand some back
    off = VOCAB.index(texts[0])  # the synthetic engine cycles through its vocabulary: in order
    assert texts == [VOCAB[(off + i) % len(VOCAB)] for i in range(tokens)]
    assert (
        srv.metric(
            "llmserve_inter_token_latency_seconds_count",
            endpoint="/v1/chat/completions",
            stream="true",
        )
        == tokens - 1
    )
