"""Servers that never finish, through ``llmload run``: every request still one record.

Small misbehaving servers on loopback (``Scripted`` from the http1-client tests:
raw sockets, one thread per connection) answer each chat request with a stream
that never ends — an SSE event whose bytes keep coming without its blank line,
a stream of valid events with no end, a sync body with no end, a slow stream
still going at the phase's end.  The run must end each such request as its
class (``protocol`` past ``--max-event-bytes``/``--max-body-bytes``, a
``disconnect`` "cancelled by the client: run stopped" past ``--drain-timeout``),
close its connection (the server's next write fails), and finish in about the
phase's length plus the drain, not ``--request-timeout`` later.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.loadtests import run_cli
from tests.integration.test_http1_client import CHUNKED, TOKEN, Scripted, chunk, scripted

__all__ = ["scripted"]  # the fixture, imported for the tests below

#: the documented error of a request the run cancelled (``loadtests.run.users.CANCELLED``;
#: importing that module would import locust, which monkey-patches this process)
CANCELLED = "cancelled by the client: run stopped"
MODELS = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode()
EVENT = b"data: " + json.dumps(TOKEN).encode() + b"\n\n"


class Endless:
    """A chat answer that never ends by itself; records when the client hung up."""

    def __init__(self, piece: bytes, first: bytes, every_s: float, head: bytes = CHUNKED) -> None:
        self.piece, self.first, self.every_s, self.head = piece, first, every_s, head
        self.hung_up: list[float] = []  # when a write found the connection closed
        self.sent: list[int] = []  # bytes written before that

    def __call__(self, conn: socket.socket) -> bool:
        chunked = self.head is CHUNKED
        wrap = chunk if chunked else (lambda b: b)
        sent = 0
        try:
            conn.sendall(self.head + b"\r\n" + wrap(self.first))
            while True:
                conn.sendall(wrap(self.piece))
                sent += len(self.piece)
                time.sleep(self.every_s)
        except OSError:
            self.hung_up.append(time.monotonic())
            self.sent.append(sent)
            return False


def serve(scripted: Callable[..., Scripted], answer: Endless) -> Scripted:
    def script(_n: int, head: bytes) -> Any:
        if head.startswith(b"GET"):
            length = b"content-length: %d\r\n\r\n" % len(MODELS)
            return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + length + MODELS
        return answer

    return scripted(script)


def posts(server: Scripted) -> int:
    return sum(1 for h in server.requests if h.startswith(b"POST"))


def run(tmp_path: Path, server: Scripted, *args: str) -> Any:
    res = run_cli(
        tmp_path / "run",
        "--target",
        server.url,
        "--users",
        "2",
        "--pacing",
        "0s",
        "--duration",
        "2s",
        "--request-timeout",
        "60s",
        "--stall-timeout",
        "30s",
        *args,
        timeout=120,
    )
    assert res.rc in (0, 3), res.stderr[-3000:]
    return res


@pytest.mark.parametrize("http_client", ["http1", "httpx"])
def test_an_event_that_never_ends_is_cut_at_its_cap(
    scripted: Callable[..., Scripted], tmp_path: Path, http_client: str
) -> None:
    answer = Endless(b"x" * 4096, b"data: ", 0.0005)
    server = serve(scripted, answer)
    res = run(
        tmp_path,
        server,
        "--modes",
        "stream",
        "--max-event-bytes",
        "256KiB",
        "--http-client",
        http_client,
    )
    records = res.records
    assert len(records) == posts(server) > 0  # every request the server saw: one record
    for r in records:
        assert r["status"] == "protocol", r
        assert "SSE event over --max-event-bytes (256 KiB)" in r["error"], r
    # the client closed each connection there: no server write went on far past the cap
    # (the kernel's socket buffers hold what was written before the client hung up)
    assert len(answer.hung_up) == len(records)
    assert max(answer.sent) < 256 * 1024 + 8 * 1024 * 1024, answer.sent
    assert res.run_json["config"]["max_event_bytes"] == 256 * 1024


@pytest.mark.parametrize("http_client", ["http1", "httpx"])
def test_a_stream_that_never_ends_is_cut_at_the_body_cap(
    scripted: Callable[..., Scripted], tmp_path: Path, http_client: str
) -> None:
    answer = Endless(EVENT * 64, EVENT, 0.0005)
    server = serve(scripted, answer)
    res = run(
        tmp_path,
        server,
        "--modes",
        "stream",
        "--max-body-bytes",
        "512KiB",
        "--http-client",
        http_client,
    )
    records = res.records
    assert len(records) == posts(server) > 0
    for r in records:
        assert r["status"] == "protocol", r
        assert "response body over --max-body-bytes (512 KiB)" in r["error"], r
        # what came before the cap was read and timed as usual
        assert r["ttft_s"] is not None and r["output_tokens"] > 1000, r
    assert len(answer.hung_up) == len(records)


def test_a_sync_body_that_never_ends_is_cut_at_the_body_cap(
    scripted: Callable[..., Scripted], tmp_path: Path
) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
    answer = Endless(b" " * 8192, b'{"choices": [', 0.0005, head=head)
    server = serve(scripted, answer)
    res = run(tmp_path, server, "--modes", "sync", "--max-body-bytes", "1MiB")
    records = res.records
    assert len(records) == posts(server) > 0
    for r in records:
        assert r["status"] == "protocol", r
        assert "response body over --max-body-bytes (1 MiB)" in r["error"], r


@pytest.mark.parametrize("workers", [0, 1])
def test_a_phase_waits_for_stragglers_only_its_drain_timeout(
    scripted: Callable[..., Scripted], tmp_path: Path, workers: int
) -> None:
    """A stream that keeps going slowly (an event every 0.2 s, never ending) outlives
    its phase: the phase waits ``--drain-timeout`` for it, then cancels it — one
    ``disconnect`` record each — instead of waiting ``--request-timeout`` (60 s here;
    the old drain waited that plus 5 s)."""
    answer = Endless(EVENT, EVENT, 0.2)
    server = serve(scripted, answer)
    drain = 1.5
    args = ["--modes", "stream", "--drain-timeout", f"{drain}s", "--workers", str(workers)]
    res = run(tmp_path, server, *args)
    records = res.records
    assert len(records) == posts(server) == 2  # 2 users, each one endless request
    for r in records:
        assert r["status"] == "disconnect" and r["error"] == CANCELLED, r
        assert r["output_tokens"] >= 2 and r["e2e_s"] is None, r
    (phase,) = res.run_json["phases"]
    length = phase["ended_at"] - phase["started_at"]
    # the phase: its 2 s, then the drain, then the stop; the request timeout is 60 s
    assert 2.0 + drain <= length < 60.0 / 2, phase
