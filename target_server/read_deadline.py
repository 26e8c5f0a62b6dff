"""Read deadlines: a client that opens a connection, or starts a request, and stalls is dropped.

At thousands of connections some clients stall: a connection opened and never
used, a request head cut off halfway, a body that stops coming.  uvicorn times
out only an idle kept-alive connection after a response, so each of these held
its socket (and a body's request task) for ever.  As nginx does
(``client_header_timeout``, ``client_body_timeout``, both 60 s by default):

* ``--client-header-timeout``: a request head must be complete within this many
  seconds of the connection's start (its first request) or of its first byte (a
  later request on a kept-alive connection).  A connection that sent nothing is
  closed; one that sent part of a head gets a 408 and is closed.  Such requests
  never reach the app, so they are not counted in ``llmserve_requests_total``.
* ``--client-body-timeout``: while a request's body is still due, the client may
  send nothing for this many seconds (between two reads, not for the whole body).
  Then the client gets a 408 and the connection is closed; the request's task sees
  the disconnect and the request is counted with status ``client_timeout``.

No per-request timer in the usual case: a deadline is armed only when a read
leaves a connection waiting for more of a head or a body (or when the
connection opens), and it re-arms itself from the last progress instead of
being reset by every read.  Everyone else is served meanwhile: a stalled
client holds its socket, never the event loop.
"""

from __future__ import annotations

import asyncio

from llmload.target_server.errors import ApiError
from llmload.target_server.write_deadline import ServerProtocol

#: scope key: set when the request's body did not arrive within ``--client-body-timeout``
BODY_TIMED_OUT = "llmload.body_timed_out"

_NEW, _HEAD, _BODY = "new", "head", "body"


class ReadDeadlineProtocol(ServerProtocol):
    """``ServerProtocol`` plus the header and body read deadlines (0 turns one off)."""

    header_timeout = 60.0
    body_timeout = 60.0
    _reading: str | None = None  # what the connection waits for: _NEW, _HEAD, _BODY or None
    _since = 0.0  # when the head began (connection or first byte) / the body last progressed
    _head_bytes = False  # some of the current head has arrived
    _read_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn's protocol narrows the transport type
        super().connection_made(transport)
        self._reading, self._since = _NEW, self.loop.time()
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._reading == _BODY:
            self._since = self.loop.time()  # the body progressed
        self._head_bytes = True
        super().data_received(data)
        if self._reading is not None and self._read_timer is None:
            self._arm()  # this read left the connection waiting for more of a head or body

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._reading != _NEW:  # a later request: its head's clock starts now
            self._reading, self._since = _HEAD, self.loop.time()
        else:
            self._reading = _HEAD

    def on_headers_complete(self) -> None:
        self._reading, self._since = _BODY, self.loop.time()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._reading = None
        self._head_bytes = False
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._reading = None
        self._disarm()
        super().connection_lost(exc)

    # -- the deadline ----------------------------------------------------------------

    def _limit(self) -> float:
        return self.header_timeout if self._reading in (_NEW, _HEAD) else self.body_timeout

    def _arm(self) -> None:
        limit = self._limit()
        if limit > 0:
            self._read_timer = self.loop.call_at(self._since + limit, self._on_deadline)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _on_deadline(self) -> None:
        self._read_timer = None
        state = self._reading
        if state is None or self.transport.is_closing():
            return  # the request arrived whole meanwhile
        limit = self._limit()
        if limit <= 0:
            return  # this wait has no deadline (its timeout is 0)
        if self.loop.time() < self._since + limit:
            self._arm()  # progress since it was armed (a body read, a new head)
            return
        self._reading = None
        if state == _BODY:
            cycle = self.cycle
            if cycle is not None:
                cycle.scope[BODY_TIMED_OUT] = True  # type: ignore[literal-required]  # our own key in the ASGI scope, which is a TypedDict
            what = f"the request body stopped coming for {limit:g} s"
            self._answer_408(what, "client_body_timeout")
        elif state == _HEAD and self._head_bytes:
            what = f"the request head was not complete within {limit:g} s"
            self._answer_408(what, "client_header_timeout")
        else:  # a connection that never sent a byte: nobody to answer
            self.logger.info("connection sent nothing for %g s: closed", limit)
            self.transport.close()

    def _answer_408(self, what: str, code: str) -> None:
        self.logger.info("%s: 408, connection closed", what)
        # (a head cut short has no cycle of its own: ``self.cycle`` is the previous request's)
        if code == "client_header_timeout" or not self.cycle.response_started:
            body = ApiError(408, what, code=code).payload()
            head = b"HTTP/1.1 408 Request Timeout\r\n"
            for name, value in self.server_state.default_headers:
                head += name + b": " + value + b"\r\n"
            head += b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body)
            self.transport.write(head + b"connection: close\r\n\r\n" + body)
        self.transport.close()


def http_protocol(
    send_timeout: float, header_timeout: float, body_timeout: float
) -> type[ReadDeadlineProtocol]:
    """The protocol class for ``uvicorn.Config(http=...)``: write and read deadlines (0: none)."""
    return type(
        "ServerProtocol",
        (ReadDeadlineProtocol,),
        {
            "send_timeout": float(send_timeout),
            "header_timeout": float(header_timeout),
            "body_timeout": float(body_timeout),
        },
    )
