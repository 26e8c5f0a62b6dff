"""The http1 client (our own HTTP/1.1 client) against real servers on loopback, beside httpx.

Both paths (``--http-client http1`` and ``httpx``) must give the same records —
status, tokens, end of stream, the server's own timings, a connection kept alive
— against the bundled server and the reference server; and the http1 one must
end every request as exactly one error class when a server misbehaves (stall,
cut body, reset, 5xx, an encoding it does not read).
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bench.harness import _reference
from llmload.loadtests.measure.adapters import get_adapter
from llmload.loadtests.measure.adapters.base import Prompt
from llmload.loadtests.measure.record import Mode, RequestRecord
from llmload.loadtests.measure.timing import RecordMeta, StreamTimer
from llmload.loadtests.options import ConnectionOptions
from llmload.loadtests.transport.http1 import Http1Client
from llmload.loadtests.transport.target import Target, clock, perform

CLIENTS = ("http1", "httpx")


def run(
    target: Target, client: Any, mode: Mode = "stream", tokens: int = 4, model: str = "m"
) -> RequestRecord:
    return exchange(target, client, mode, tokens, model)[0]


def exchange(
    target: Target, client: Any, mode: Mode = "stream", tokens: int = 4, model: str = "m"
) -> tuple[RequestRecord, dict[str, float]]:
    """One request's record, and the server's whole ``x_llmload`` block (the record
    keeps three of its keys)."""
    adapter = get_adapter("openai-chat")
    server: dict[str, float] = {}
    parse = adapter.parse_event

    def keep(event: str | None, data: str) -> Any:
        info = parse(event, data)
        server.update(info.server or {})
        return info

    adapter.parse_event = keep  # type: ignore[method-assign]  # the test wraps the adapter's method
    call = adapter.build(
        Prompt("s", "p", prompt="hi", max_tokens=tokens),
        mode=mode,
        model=model,
        options={"ignore_eos": True},
    )
    timer = StreamTimer(adapter, clock())
    status, error = perform(client, target, call, timer)
    meta = RecordMeta("r", "p", "s", mode, adapter.endpoint, time.time())
    return timer.finish(clock(), meta, status=status, error=error), server


@pytest.mark.parametrize("http_client", CLIENTS)
def test_same_records_from_both_paths_against_the_bundled_server(
    start_server: Callable[..., Any], http_client: str
) -> None:
    server = start_server(ttft_ms=20, itl_ms=2)
    target = Target(
        ConnectionOptions(
            target=server.url, request_timeout=30, stall_timeout=10, http_client=http_client
        ),
        {"X-Team": "a"},
    )
    model = target.detect_model() or ""
    with target.user_client() as client:
        assert isinstance(client, Http1Client) == (http_client == "http1")
        recs = [run(target, client, mode, model=model) for mode in ("stream", "sync", "stream")]
    for rec in recs:
        assert rec.ok, rec.error
        assert rec.output_tokens == 4 and rec.token_source == "usage"
        assert rec.server_ttft_s is not None and rec.ttft_s is not None
        # the bundled server stamps a token as it hands it to the socket, before the
        # write (target_server.generation): its stamp is never late, so zero bounds this
        assert rec.ttft_s >= rec.server_ttft_s
    assert recs[0].stream_end == "done" and len(recs[0].itl_s) == 3
    # one connection for the user: only its first request opened one
    assert recs[0].connect_s is not None and [r.connect_s for r in recs[1:]] == [None, None]


#: CLOCK_REALTIME may be slewed by up to 500 ppm against the monotonic clock, and a
#: receive stamp is moved back by a wait measured on it (seconds per second of wait)
SLEW = 500e-6


def test_reference_server_both_paths_interleaved() -> None:
    """Client TTFT − the reference server's is bounded below by how late the server's
    stamp can be (its first write's duration, ``x_llmload.write_s``), not by zero: the
    reference server stamps after its write returns, the kernel stamps the client's copy
    inside that write, and a write descheduled on a busy machine leaves the server's
    stamp milliseconds after the client's (``make test`` with a busy loop per core)."""
    proc, url = _reference(5, ttft_ms=10)
    try:
        targets = {
            c: Target(
                ConnectionOptions(target=url, request_timeout=30, stall_timeout=10, http_client=c),
                {},
            )
            for c in CLIENTS
        }
        sessions = {c: t.user_client() for c, t in targets.items()}
        for _ in range(2):
            for c in CLIENTS:
                rec, server = exchange(targets[c], sessions[c], tokens=3)
                assert rec.ok and rec.stream_end == "done", rec.error
                assert rec.ttft_s is not None and rec.server_ttft_s is not None
                late = server["write_s"] + SLEW * rec.ttft_s
                assert -late <= rec.ttft_s - rec.server_ttft_s < 1.0, (rec, server)
        for s in sessions.values():
            s.close()
    finally:
        proc.terminate()
        proc.wait(10)


# -- a scripted server: each connection reads one request and answers with a script ---------


class Scripted:
    """Answers the n-th request with ``script(n, request)`` (bytes, or a callable on the socket)."""

    def __init__(self, script: Callable[[int, bytes], Any]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.script = script
        self.requests: list[bytes] = []
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                while len(buf) < length:
                    buf += conn.recv(65536)
                self.requests.append(head)
                buf = buf[length:]
                answer = self.script(len(self.requests) - 1, head)
                try:
                    if callable(answer):
                        if not answer(conn):
                            return
                    else:
                        conn.sendall(answer)
                except OSError:  # the client gave up first (a stall, a deadline)
                    return

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def scripted() -> Iterator[Callable[..., Scripted]]:
    made: list[Scripted] = []

    def factory(script: Callable[[int, bytes], Any]) -> Scripted:
        made.append(Scripted(script))
        return made[-1]

    yield factory
    for s in made:
        s.close()


def sse(*objs: Any, done: bool = True) -> bytes:
    body = b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs)
    return body + (b"data: [DONE]\n\n" if done else b"")


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


TOKEN = {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
FINISH = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
CHUNKED = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"


def http1_target(url: str, **kw: Any) -> Target:
    kw.setdefault("request_timeout", 10)
    kw.setdefault("stall_timeout", 10)
    return Target(ConnectionOptions(target=url, **kw), {})


@pytest.mark.parametrize("http_client", CLIENTS)
def test_error_classes(scripted: Callable[..., Scripted], http_client: str) -> None:
    """Each failure ends as one record with its class, the same on both paths."""

    def first_token(c: socket.socket, then_wait: float = 0.0) -> bool:
        c.sendall(CHUNKED + b"\r\n" + chunk(sse(TOKEN, done=False)))
        time.sleep(then_wait)
        return False  # then close the connection

    def script(n: int, _head: bytes) -> Any:
        if n == 0:  # a stall after the first token
            return lambda c: first_token(c, then_wait=1.5)
        if n == 1:  # the body cut short
            return first_token
        if n == 2:  # 5xx with an OpenAI error body
            body = json.dumps({"error": {"message": "overloaded", "type": "server_error"}})
            return (
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body.encode())
            )
        if n == 3:  # transformers serve: finish chunk, clean end, no [DONE]; gzip'd
            data = gzip.compress(sse(TOKEN, FINISH, done=False))
            return CHUNKED + b"content-encoding: gzip\r\n\r\n" + chunk(data) + b"0\r\n\r\n"
        if n == 4:  # a reset before any byte of the answer

            def reset(c: socket.socket) -> bool:
                linger = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # on, 0 s: close sends RST
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                return False

            return reset
        return CHUNKED + b"\r\n" + chunk(sse(TOKEN, FINISH)) + b"0\r\n\r\n"

    server = scripted(script)
    target = http1_target(server.url, stall_timeout=0.5, http_client=http_client)
    with target.user_client() as client:
        got = [run(target, client) for _ in range(6)]
    statuses = [r.status for r in got]
    assert statuses == ["stall", "disconnect", "http_5xx", "ok", "disconnect", "ok"], [
        (r.status, r.error) for r in got
    ]
    assert got[0].ttft_s is not None and got[0].e2e_s is None
    assert "overloaded" in (got[2].error or "")
    assert got[3].stream_end == "eof" and got[3].finish_reason == "stop"
    assert got[5].stream_end == "done"


def test_http1_keeps_alive_sends_cookies_and_auth(scripted: Callable[..., Scripted]) -> None:
    ok = CHUNKED + b"\r\n" + chunk(sse(TOKEN, FINISH)) + b"0\r\n\r\n"

    def script(n: int, _head: bytes) -> bytes:
        if n == 0:
            return ok.replace(b"\r\n\r\n", b"\r\nset-cookie: AWSALB=sticky; Path=/\r\n\r\n", 1)
        return ok

    server = scripted(script)
    url = server.url.replace("http://", "http://user:pa%40ss@") + "/llm/v1?key=abc"
    target = Target(
        ConnectionOptions(target=url, request_timeout=10, stall_timeout=10), {"X-Team": "a"}
    )
    with target.user_client() as client:
        assert [run(target, client).status for _ in range(3)] == ["ok"] * 3
    assert server.connections == 1
    first, second = server.requests[0].decode(), server.requests[1].decode()
    assert first.startswith("POST /llm/v1/chat/completions?key=abc HTTP/1.1\r\n")
    assert "authorization: basic dxnlcjpwyubzcw==" in first.lower()  # user:pa@ss
    assert "x-team: a" in first.lower() and "cookie" not in first.lower()
    assert "cookie: AWSALB=sticky" in second.replace("Cookie", "cookie")


def test_an_unreadable_coding_moves_the_target_to_httpx(
    scripted: Callable[..., Scripted], capsys: pytest.CaptureFixture[str]
) -> None:
    ok = CHUNKED + b"\r\n" + chunk(sse(TOKEN, FINISH)) + b"0\r\n\r\n"

    def script(n: int, _head: bytes) -> bytes:
        if n == 0:
            return ok.replace(b"chunked", b"gzip, chunked")
        return ok

    server = scripted(script)
    target = http1_target(server.url)
    with target.user_client() as client:
        first, second = run(target, client), run(target, client)
    assert first.status == "protocol" and "http1 HTTP client" in (first.error or "")
    assert second.ok, second.error
    assert target.origin().unsupported is not None
    assert "go through httpx" in capsys.readouterr().err


GEVENT_CHILD = """
from gevent import monkey
monkey.patch_all()
import json, sys, time
import gevent
from llmload.loadtests.measure.adapters import get_adapter
from llmload.loadtests.measure.adapters.base import Prompt
from llmload.loadtests.options import ConnectionOptions
from llmload.loadtests.transport.target import Target, clock, perform
from llmload.loadtests.options import ConnectionOptions
from llmload.loadtests.measure.timing import RecordMeta, StreamTimer

target = Target(ConnectionOptions(target=sys.argv[1], request_timeout=3, stall_timeout=0.5), {})
adapter = get_adapter("openai-chat")
out = []

def user():
    with target.user_client() as client:
        for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 4):
            call = adapter.build(Prompt("s", "p", prompt="hi", max_tokens=2), mode="stream",
                                 model="m", options={})
            began = clock()
            timer = StreamTimer(adapter, began)
            status, error = perform(client, target, call, timer)
            rec = timer.finish(clock(), RecordMeta("r", "p", "s", "stream", "/x", 0.0),
                               status=status, error=error)
            out.append([rec.status, round(clock() - began, 2)])

ticks = []
def ticker():  # the hub stays free while a request waits
    for _ in range(20):
        ticks.append(clock())
        gevent.sleep(0.05)

gevent.joinall([gevent.spawn(user), gevent.spawn(ticker)])
print(json.dumps({"records": out, "ticks": len(ticks)}))
"""


def test_limits_under_gevent(scripted: Callable[..., Scripted]) -> None:
    """Under gevent the stall limit is kept by the watchdog (no timer per read): a stalled
    stream fails as ``stall`` after ~the limit, and the next request on a new connection is
    fine; a request over ``--request-timeout`` is ``timeout``."""
    import subprocess
    import sys
    from pathlib import Path

    ok = CHUNKED + b"\r\n" + chunk(sse(TOKEN, FINISH)) + b"0\r\n\r\n"

    def stalled(c: socket.socket) -> bool:
        c.sendall(CHUNKED + b"\r\n" + chunk(sse(TOKEN, done=False)))
        time.sleep(2.0)
        return False

    def trickle(c: socket.socket) -> bool:  # a byte every 0.3 s: never a stall, over 3 s in all
        c.sendall(CHUNKED + b"\r\n")
        for _ in range(15):
            c.sendall(chunk(b": keep-alive\n\n"))
            time.sleep(0.3)
        return False

    server = scripted(lambda n, _h: [stalled, ok, trickle, ok][n])
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", GEVENT_CHILD, server.url],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    statuses = [s for s, _ in got["records"]]
    assert statuses == ["stall", "ok", "timeout", "ok"], got
    assert 0.4 <= got["records"][0][1] < 1.5  # the 0.5 s limit, checked every 25 ms
    assert 2.9 <= got["records"][2][1] < 4.0
    assert got["ticks"] == 20


def test_misbehaving_server_under_gevent(scripted: Callable[..., Scripted]) -> None:
    """Through the http1 client under gevent (the direct read on the hub's watcher), a reset
    mid-body, a cut body, a stall and a reset before the head each end as exactly one record
    with its class, and the request after each one, on a new connection, is fine."""
    import subprocess
    import sys
    from pathlib import Path

    ok = CHUNKED + b"\r\n" + chunk(sse(TOKEN, FINISH)) + b"0\r\n\r\n"

    def first_token(c: socket.socket, then_wait: float = 0.0, rst: bool = False) -> bool:
        c.sendall(CHUNKED + b"\r\n" + chunk(sse(TOKEN, done=False)))
        time.sleep(then_wait)
        if rst:  # linger on, 0 s: close sends RST
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01" + b"\x00" * 7)
        return False

    def reset_head(c: socket.socket) -> bool:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01" + b"\x00" * 7)
        return False

    script = [
        lambda c: first_token(c, then_wait=0.1, rst=True),  # reset mid-body
        ok,
        lambda c: first_token(c, then_wait=0.1),  # the body cut short (FIN, no last chunk)
        ok,
        lambda c: first_token(c, then_wait=1.5),  # a stall after the first token
        ok,
        reset_head,  # a reset before any byte of the answer
        ok,
    ]
    server = scripted(lambda n, _h: script[n])
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", GEVENT_CHILD, server.url, str(len(script))],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]  # nothing escaped into the hub
    got = json.loads(out.stdout.strip().splitlines()[-1])
    statuses = [s for s, _ in got["records"]]
    want = ["disconnect", "ok", "disconnect", "ok", "stall", "ok", "disconnect", "ok"]
    assert statuses == want, got
    assert got["records"][4][1] < 1.5  # the 0.5 s stall limit, not the server's 1.5 s
    assert got["ticks"] == 20
