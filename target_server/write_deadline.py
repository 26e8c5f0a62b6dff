"""uvicorn's httptools protocol with a write deadline: a client that stops reading is dropped.

A send blocks only while the connection's write buffer is over its high-water
mark (the transport has paused writing).  If it stays paused for
``send_timeout`` seconds the client has read nothing for that long: the
connection is aborted (no graceful close, which would wait for the buffer to
drain forever), so the request's task sees ``http.disconnect`` and its slot,
its generation and its socket are freed.  No per-token cost: only the pause and
resume callbacks of the transport are involved.

It also leaves a ``ChunkWriter`` in each request's scope (``CHUNK_WRITER``): a
streamed body's chunks written straight to the connection, with the same
chunked framing uvicorn's ``send`` writes, from code that is not the request's task
(the pacer's tick: ``target_server.generation``).

It also answers a request httptools cannot parse (a 31-digit Content-Length, a
broken request line) with an OpenAI error object instead of uvicorn's plain text.
Such a request never reaches the app, so it is not counted in
``llmserve_requests_total``.
"""

from __future__ import annotations

import asyncio
from time import perf_counter

from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from llmload.target_server.errors import ApiError

#: scope key: when the request's headers were parsed (``perf_counter``), the server's
#: clock for the request — before the app's task first runs, which under a burst of
#: requests can be several requests' handling later
ARRIVED = "llmload.arrived"

#: scope key: the request's ``ChunkWriter``
CHUNK_WRITER = "llmload.chunk_writer"


class ChunkWriter:
    """Body chunks of one response written straight to its connection, no ASGI ``send``.

    ``write`` refuses (returns False, writes nothing) unless the response has started
    with chunked framing and is not complete, the client is connected and the
    connection is not paused for writing (a slow reader): the caller then hands the
    chunk to the ASGI ``send``, which waits for the client or notices it left.  The
    response's last chunk always goes through ``send`` (it completes the cycle).
    """

    __slots__ = ("_cycle", "_write")

    def __init__(self, cycle: RequestResponseCycle):
        self._cycle = cycle
        self._write = cycle.transport.write

    def write(self, body: bytes) -> bool:
        """Write one non-empty chunk now if the connection takes it; False if not."""
        c = self._cycle
        if (
            c.disconnected
            or c.flow.write_paused
            or c.response_complete
            or not c.chunked_encoding
            or not c.response_started
        ):
            return False
        self._write(b"%x\r\n%b\r\n" % (len(body), body))
        return True


class ServerProtocol(HttpToolsProtocol):
    """HTTP/1.1 (httptools) that aborts a connection whose writes stay paused too long.

    It also stamps each request's arrival (``ARRIVED``) as its headers are parsed.
    """

    def on_headers_complete(self) -> None:
        """Headers parsed: the request has arrived (the app reads ``scope[ARRIVED]``)."""
        scope = self.scope
        scope[ARRIVED] = perf_counter()  # type: ignore[literal-required]  # our own key in the ASGI scope, which is a TypedDict
        super().on_headers_complete()
        cycle = self.cycle  # the request's, unless an upgrade returned before making one
        if cycle is not None and cycle.scope is scope:
            scope[CHUNK_WRITER] = ChunkWriter(cycle)  # type: ignore[literal-required]  # our own key in the ASGI scope, which is a TypedDict

    send_timeout = 30.0
    _write_deadline: asyncio.TimerHandle | None = None

    def pause_writing(self) -> None:
        """The client is not keeping up: start the clock."""
        super().pause_writing()
        if self.send_timeout > 0 and self._write_deadline is None:
            self._write_deadline = self.loop.call_later(self.send_timeout, self._drop)

    def resume_writing(self) -> None:
        """The client read something: stop the clock."""
        super().resume_writing()
        self._stop_clock()

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the clock with the connection."""
        self._stop_clock()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """An unparseable request: a 400 with an OpenAI error object, then close."""
        body = ApiError(400, msg, code="invalid_http_request").payload()
        head = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head.append(b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body))
        self.transport.write(b"".join([*head, b"connection: close\r\n\r\n", body]))
        self.transport.close()

    def _stop_clock(self) -> None:
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None

    def _drop(self) -> None:
        self._write_deadline = None
        self.logger.info("client read nothing for %g s: connection dropped", self.send_timeout)
        self.transport.abort()
