"""A finished request leaves nothing for the garbage collector, over real HTTP on loopback.

At 1,000 streams every request that ended as a reference cycle (uvicorn's cycle,
its scope and the server's writer; a ticker and its own bound method) stayed in
memory until a full collection, and those collections — and the middle-generation
ones the same objects passed through — were the bundled server's TTFT tail
(docs/scale.md, "garbage collector").  Here each kind of request runs twice in
the server's own process with ``gc.DEBUG_SAVEALL``: anything the collector then
finds unreachable was a cycle that reference counting could not free.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import socket
import time
from typing import Any

import pytest

MESSAGES = [{"role": "user", "content": "hello there"}]
STREAM = {"messages": MESSAGES, "max_tokens": 5, "stream": True, "ignore_eos": True}
KINDS: dict[str, tuple[str, str, dict[str, Any] | bytes]] = {
    "chat stream": ("POST", "/v1/chat/completions", STREAM),
    "chat": ("POST", "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 5}),
    "completions stream": (
        "POST",
        "/v1/completions",
        {"prompt": "hi", "max_tokens": 5, "stream": True},
    ),
    "undecodable body": ("POST", "/v1/chat/completions", b"{not json"),
    "invalid field": ("POST", "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": -1}),
    "health": ("GET", "/health", b""),
    "models": ("GET", "/v1/models", b""),
    "metrics": ("GET", "/metrics", b""),
    "unknown path": ("GET", "/nowhere", b""),
}
ROUNDS = 20


def _request(method: str, path: str, body: dict[str, Any] | bytes) -> bytes:
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    head = f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    return f"{head}Content-Length: {len(data)}\r\n\r\n".encode() + data


def _exchange(sock: socket.socket, request: bytes) -> int:
    """Send one request on a kept-alive connection, read its whole response, return the status."""
    sock.sendall(request)
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += sock.recv(65536)
    head, _, rest = buf.partition(b"\r\n\r\n")
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        while not rest.endswith(b"0\r\n\r\n"):
            rest += sock.recv(65536)
    else:
        length = int(lower.split(b"content-length: ")[1].split(b"\r\n")[0])
        while len(rest) < length:
            rest += sock.recv(65536)
    return int(head.split()[1])


def _cycles_left(url: str, request: bytes, rounds: int, gone_early: bool = False) -> dict[str, int]:
    """Objects ``rounds`` requests left in reference cycles: type name -> count, for the
    types found at least ``rounds`` times (a cycle per request leaves ``rounds`` of each
    of its objects)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)

    def run() -> None:
        if gone_early:  # the client reads the head and leaves mid-stream
            for _ in range(rounds):
                with socket.create_connection((host, int(port)), timeout=10) as sock:
                    sock.sendall(request)
                    sock.recv(64)
            return
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            for _ in range(rounds):
                _exchange(sock, request)

    run()  # first-use costs (imports, caches) are not the request's
    time.sleep(0.3)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run()
        time.sleep(0.5)  # a stream the client left ends on the server's next write
        gc.collect()
    finally:
        gc.set_debug(0)
    garbage, ids = list(gc.garbage), {id(o) for o in gc.garbage}
    gc.garbage.clear()
    # an event loop of a server an earlier test stopped may be freed now: not ours
    loops = [o for o in garbage if isinstance(o, asyncio.AbstractEventLoop)]
    theirs = {id(o) for o in loops}
    while loops:
        for ref in gc.get_referents(loops.pop()):
            if id(ref) in ids and id(ref) not in theirs:
                theirs.add(id(ref))
                loops.append(ref)
    left = collections.Counter(
        type(o).__module__ + "." + type(o).__qualname__ for o in garbage if id(o) not in theirs
    )
    return {name: n for name, n in left.items() if n >= rounds}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_finished_request_leaves_no_reference_cycle(start_server, kind):
    srv = start_server(ttft_ms=5, itl_ms=2)
    method, path, body = KINDS[kind]
    host, port = srv.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        assert _exchange(sock, _request(method, path, body)) in {200, 400, 404}
    assert _cycles_left(srv.url, _request(method, path, body), ROUNDS) == {}


def test_a_client_that_leaves_mid_stream_leaves_no_reference_cycle(start_server):
    srv = start_server(ttft_ms=5, itl_ms=20)
    request = _request("POST", "/v1/chat/completions", {**STREAM, "max_tokens": 50})
    assert _cycles_left(srv.url, request, ROUNDS, gone_early=True) == {}


@pytest.mark.parametrize("batching", ["none", "continuous"])
def test_a_model_request_leaves_no_reference_cycle(embedded_model, batching):
    """The transformers engines too: ``GenerationConfig.from_dict`` formatted each
    request's config as indented JSON for a log line nobody reads, and json's
    pure-Python encoder left its closures in a cycle, per request."""
    from llmload.target_server.serving import start_server_thread
    from llmload.target_server.settings import Settings

    settings = Settings(
        engine="transformers", batching=batching, engine_process="off", max_context=256
    )
    srv = start_server_thread(settings, log_level="warning")
    try:
        body = {**STREAM, "max_tokens": 3, "temperature": 0.7}
        request = _request("POST", "/v1/chat/completions", body)
        assert _cycles_left(srv.url, request, 10) == {}
    finally:
        srv.stop()
