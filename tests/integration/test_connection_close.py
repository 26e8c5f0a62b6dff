"""A server that closes the connection after each response (HTTP/1.0 style, close-delimited body).

Old proxies, simple servers and some gateways answer ``Connection: close`` with
no length and no chunked framing: the body ends when the connection does, and
every request opens a new connection.  The harness must read such a stream as
it arrives (``requests`` buffers such a body to the end), and send each
request in one write (``loadtests.transport.connect``) — checked here on the server side:
its first read of every connection holds the whole request.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import ssl
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmload.loadtests.measure.adapters import get_adapter
from llmload.loadtests.measure.adapters.base import Prompt
from llmload.loadtests.measure.timing import RecordMeta, StreamTimer
from llmload.loadtests.options import ConnectionOptions
from llmload.loadtests.transport.target import Target, clock, perform
from llmload.reports.table.diagnostics import detect
from tests.fixtures.drive import drive

FIRST_S, GAP_S, TOKENS = 0.05, 0.03, 5


class CloseServer:
    """One thread per connection: read the request, stream SSE, close (TLS with ``tls``)."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.tls = tls
        self.first_reads: list[bytes] = []
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://localhost:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
                if self.tls is not None:
                    conn = self.tls.wrap_socket(conn, server_side=True)
            except OSError:
                if self.sock.fileno() < 0:
                    return
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            first = conn.recv(65536)
            self.first_reads.append(first)
            data = first
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            while len(body) < length:
                body += conn.recv(65536)
            n = json.loads(body).get("max_tokens", TOKENS)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
            )
            time.sleep(FIRST_S)
            for i in range(n):
                if i:
                    time.sleep(GAP_S)
                chunk = {"choices": [{"index": 0, "delta": {"content": f" t{i}"}}]}
                conn.sendall(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            end = {
                "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": n},
            }
            conn.sendall(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture()
def close_server() -> Iterator[CloseServer]:
    server = CloseServer()
    try:
        yield server
    finally:
        server.close()


def test_close_delimited_streams_are_read_as_they_arrive(close_server: CloseServer) -> None:
    for _ in range(3):
        rec, text = drive(close_server.url, "openai-chat", max_tokens=TOKENS)
        assert rec.status == "ok", rec.error
        assert rec.stream_end == "done" and text == "".join(f" t{i}" for i in range(TOKENS))
        assert rec.ttft_s is not None and rec.e2e_s is not None
        # the first token came long before the end: not buffered to the close
        assert FIRST_S <= rec.ttft_s < rec.e2e_s - 0.5 * (TOKENS - 1) * GAP_S
        # gaps as sent (the median: one late read on a busy machine shortens the gap after it)
        assert len(rec.itl_s) == TOKENS - 1 and statistics.median(rec.itl_s) >= 0.5 * GAP_S


def test_each_request_leaves_in_one_send(close_server: CloseServer) -> None:
    for _ in range(3):
        rec, _ = drive(close_server.url, "openai-chat", max_tokens=2)
        assert rec.status == "ok", rec.error
    assert len(close_server.first_reads) == 3
    for first in close_server.first_reads:
        head, sep, body = first.partition(b"\r\n\r\n")
        assert sep and json.loads(body)["max_tokens"] == 2, first[:300]


def test_records_say_when_a_request_paid_for_a_new_connection(
    close_server: CloseServer, start_server: Callable[..., Any]
) -> None:
    records = []
    for _ in range(4):
        rec, _ = drive(close_server.url, "openai-chat", max_tokens=2)
        assert rec.connect_s is not None and rec.ttft_s is not None
        assert 0 < rec.connect_s < rec.ttft_s
        records.append(dataclasses.replace(rec, user_id=0))  # one user's requests, in turn
    assert "connection_per_request" in [d.code for d in detect(records, "stream")]
    # a server that keeps the connection: only the first request of a client opens one
    server = start_server(ttft_ms=5, itl_ms=1)
    model = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
    target = Target(ConnectionOptions(target=server.url, request_timeout=30, stall_timeout=30), {})
    adapter = get_adapter("openai-chat")
    prompt = Prompt("s", "p", prompt="hi", max_tokens=3)
    connects = []
    with target.httpx_client() as client:
        for _ in range(3):
            call = adapter.build(prompt, mode="stream", model=model, options={})
            timer = StreamTimer(adapter, clock())
            assert perform(client, target, call, timer) == (None, None)
            rec = timer.finish(clock(), RecordMeta("r", "p", "s", "stream", "/x", 0.0))
            assert rec.ok, rec.error
            connects.append(rec.connect_s)
    assert connects[0] is not None and connects[1:] == [None, None]


@pytest.mark.parametrize("http_client", ["http1", "httpx"])
def test_over_tls_the_request_still_leaves_in_one_send(tmp_path: Path, http_client: str) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed (it makes the test's self-signed certificate)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    server = CloseServer(tls=ctx)
    try:
        target = Target(
            ConnectionOptions(
                target=server.url,
                request_timeout=30,
                stall_timeout=30,
                ca_bundle=str(cert),
                http_client=http_client,
            ),
            {},
        )
        adapter = get_adapter("openai-chat")
        prompt = Prompt("s", "p", prompt="hi", max_tokens=3)
        with target.user_client() as client:
            for _ in range(2):
                call = adapter.build(prompt, mode="stream", model="m", options={})
                timer = StreamTimer(adapter, clock())
                assert perform(client, target, call, timer) == (None, None)
                rec = timer.finish(clock(), RecordMeta("r", "p", "s", "stream", "/x", 0.0))
                assert rec.ok and rec.stream_end == "done", rec.error
                assert rec.connect_s is not None  # TCP + TLS handshake, inside the TTFT
    finally:
        server.close()
    for first in server.first_reads:
        head, sep, body = first.partition(b"\r\n\r\n")
        assert sep and json.loads(body)["max_tokens"] == 3, first[:300]
