"""The bundled server under bad input: random bodies, huge bodies, clients that never read,
100 clients leaving mid-stream at once.  Real uvicorn on loopback; raw sockets for the abuse.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings

from bench.bad_bodies import (
    CHAT,
    COMPLETIONS,
    error_problems,
    hostile_bodies,
    request_bodies,
    send_checked,
)
from bench.server_abuse import (
    close_abruptly,
    connect,
    dechunk,
    open_streams,
    oversized,
    raw_request,
    read_to_eof,
    stream_body,
    wait_until,
)
from llmload.target_server.settings import MAX_BODY_BYTES


def test_random_bodies_get_an_answer_never_a_5xx(start_server: Callable[..., Any]) -> None:
    server = start_server(ttft_ms=0, itl_ms=0)
    sent: list[int] = []
    with httpx.Client(base_url=server.url, timeout=30) as http:

        @settings(
            max_examples=400,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(request=request_bodies())
        def check(request: tuple[str, str, bytes]) -> None:
            path, content_type, body = request
            status, problems = send_checked(http, path, content_type, body)
            sent.append(status)
            assert not problems, (status, path, body[:300])

        check()
        assert http.get("/health").status_code == 200
    assert len(sent) >= 350
    assert {400, 200} <= set(sent), sorted(set(sent))
    # each of them was counted once, and none is still holding a slot or generating
    assert server.total_requests() == len(sent)
    assert server.state.admission.running == 0 and server.engine.running() == 0


def test_bodies_the_decoder_raises_on_are_400_invalid_json_counted_once(
    start_server: Callable[..., Any],
) -> None:
    server = start_server(ttft_ms=0, itl_ms=0)
    kinds: set[str] = set()
    with httpx.Client(base_url=server.url, timeout=30) as http:

        @settings(
            max_examples=120, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(request=hostile_bodies())
        def check(request: tuple[str, bytes, str]) -> None:
            path, body, kind = request
            before = server.total_requests()
            r = http.post(path, content=body, headers={"content-type": "application/json"})
            problems = error_problems(r.status_code, r.headers.get("content-type", ""), r.content)
            assert r.status_code == 400 and not problems, (kind, r.status_code, r.content[:300])
            assert r.json()["error"]["code"] == "invalid_json", (kind, r.json())
            assert server.total_requests() == before + 1, kind
            kinds.add(kind)

        check()
        assert http.get("/health").status_code == 200
    assert len(kinds) >= 6, kinds  # the strategy reached (nearly) every class
    bad = sum(
        server.metric("llmserve_requests_total", endpoint=ep, stream="false", status="bad_request")
        for ep in (CHAT, COMPLETIONS)
    )
    assert bad == server.total_requests()


def test_oversized_bodies_are_refused_and_the_server_lives(
    start_server: Callable[..., Any],
) -> None:
    server = start_server(ttft_ms=0, itl_ms=0)
    answers = oversized(server.url, MAX_BODY_BYTES)
    assert set(answers) == {"declared", "declared absurd", "streamed, no Content-Length"}
    # a Content-Length of 31 digits never reaches the app: the HTTP parser refuses it, and
    # the server's protocol class still answers with an OpenAI error object
    status, body = answers.pop("declared absurd")
    assert status == 400 and not error_problems(400, "application/json", body), body[:200]
    assert json.loads(body)["error"]["code"] == "invalid_http_request"
    for case, (status, body) in answers.items():
        assert status == 413, (case, status, body[:200])
        assert not error_problems(status, "application/json", body), (case, body[:200])
        assert json.loads(body)["error"]["code"] == "request_too_large"
    r = httpx.post(server.url + CHAT, json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200
    too_large = [
        server.metric("llmserve_requests_total", endpoint=ep, stream="false", status="too_large")
        for ep in (CHAT, COMPLETIONS)
    ]
    assert too_large == [1, 1]


def test_unparseable_http_gets_an_openai_error_object(
    start_server: Callable[..., Any],
) -> None:
    server = start_server(ttft_ms=0, itl_ms=0)
    for raw in (
        b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
        b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: x\r\nBad Header Name: 1\r\n\r\n",
        b"\x00\x01 not http at all\r\n\r\n",
    ):
        with connect(server.url) as sock:
            sock.sendall(raw)
            head, body = dechunk(read_to_eof(sock))
        assert head.startswith(b"HTTP/1.1 400 "), (raw, head)
        assert b"content-type: application/json" in head.lower(), head
        assert not error_problems(400, "application/json", body), (raw, body[:200])
    assert httpx.get(server.url + "/health").status_code == 200


def test_clients_that_never_read_are_bounded_and_timed_out(
    start_server: Callable[..., Any],
) -> None:
    tokens, n, deaf = 400_000, 3, 2
    # the readers must start reading between the request timeout (1 s) and the write deadline
    # (6 s without progress): a window wide enough for a loaded 2-core machine
    server = start_server(
        ttft_ms=0,
        itl_ms=0,
        request_timeout=1.0,
        send_timeout=6.0,
        max_output_tokens=tokens,
        max_context=2 * tokens,
    )
    uvicorn_state = server.server.server_state
    # n clients read once the request has timed out; `deaf` clients never read at all
    streams = open_streams(server.url, n + deaf, tokens, rcvbuf=4096)
    readers, deafs = streams[:n], streams[n:]
    try:
        # nobody reads: the generations wait on the full socket buffers instead of racing ahead
        # to the end (on a loaded machine setting up the streams can outlast the 1 s request
        # timeout, so a stream may already be timed out here, but none has finished ok)
        assert wait_until(
            lambda: server.state.admission.running + timeouts(server) == n + deaf, timeout=2
        ), (server.state.admission.running, timeouts(server))
        assert (
            server.metric("llmserve_requests_total", endpoint=CHAT, stream="true", status="ok") == 0
        )
        # the request timeout frees every slot and stops every generation while they still hang
        assert wait_until(lambda: server.metric("llmserve_requests_running") == 0, timeout=8)
        assert wait_until(lambda: server.engine.running() == 0, timeout=2)
        # ... and counts them at once, though their error events still wait on the clients
        assert wait_until(lambda: timeouts(server) == n + deaf, timeout=2), timeouts(server)
        assert (
            server.metric("llmserve_requests_total", endpoint=CHAT, stream="true", status="ok") == 0
        )
        # the readers read side by side (one after another, the last would start too late)
        with ThreadPoolExecutor(n) as pool:
            raws = list(pool.map(lambda s: s[1] + read_to_eof(s[0], already=s[1]), readers))
        for raw in raws:
            _head, body = dechunk(raw)
            events = [e for e in body.split(b"\n\n") if e.strip()]
            # what had been buffered, then the timeout as an error event, and no [DONE]
            assert len(body) < 16 * 2**20 and len(events) < tokens // 4
            last = json.loads(events[-1][len(b"data: ") :])
            assert last["error"]["code"] == "timeout", events[-1]
        # the deaf clients are dropped by the write deadline (--send-timeout): their tasks
        # and connections end although they never read nor close (the readers' idle
        # connections stay open until the keep-alive timeout, which a slow machine may reach)
        assert wait_until(
            lambda: not uvicorn_state.tasks and len(uvicorn_state.connections) <= n, timeout=12
        ), (len(uvicorn_state.tasks), len(uvicorn_state.connections))
        for sock, _ in deafs:  # the server's side of the connection is gone: the read ends
            read_to_eof(sock, timeout=10)
            assert at_eof(sock)
    finally:
        for sock, _ in streams:
            sock.close()
    assert timeouts(server) == n + deaf
    assert httpx.get(server.url + "/health").status_code == 200


def at_eof(sock: Any) -> bool:
    """The peer closed or reset the connection (not: the read merely timed out)."""
    sock.settimeout(0.5)
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def timeouts(server: Any) -> int:
    """Streaming chat requests the server counted as timed out."""
    return int(
        server.metric("llmserve_requests_total", endpoint=CHAT, stream="true", status="timeout")
    )


def test_hundred_clients_leave_mid_stream_at_once(start_server: Callable[..., Any]) -> None:
    n = 100
    server = start_server(ttft_ms=10, itl_ms=20)
    socks = [sock for sock, _ in open_streams(server.url, n, max_tokens=1000)]
    assert server.metric("llmserve_requests_running") == n and server.engine.running() == n
    for i, sock in enumerate(socks):  # half reset the connection, half close it politely
        if i % 2:
            close_abruptly(sock)
        else:
            sock.close()
    assert wait_until(lambda: server.metric("llmserve_requests_running") == 0, timeout=10)
    assert wait_until(lambda: server.engine.running() == 0, timeout=5)
    assert wait_until(
        lambda: (
            server.metric(
                "llmserve_requests_total", endpoint=CHAT, stream="true", status="cancelled"
            )
            == n
        ),
        timeout=5,
    )
    # and it still serves
    with connect(server.url) as sock:
        sock.sendall(raw_request(CHAT, stream_body(4)))
        _head, body = dechunk(read_to_eof(sock))
    assert body.rstrip().endswith(b"data: [DONE]")
