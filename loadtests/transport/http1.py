"""The http1 client, our own HTTP/1.1: one kept-alive socket per user, large reads, no layers.

At 1,000 streams the httpx path spent most of the load generator's CPU in
httpx/httpcore/h11 (the profiles: ``docs/scale.md``, *The load generator*):
request objects and header merging per request, and per read a stack of
generators and h11 events.  Here a request is one ``sendall`` of bytes whose head
was prepared once per path; the response head is parsed once; the body is read
with ``recv`` into the chunked decoder (``loadtests.transport.framing``) and each
read's payload goes to the timing core with the time its bytes arrived
(``Conn.last``: the kernel's receive stamp where there is one,
``loadtests.transport.sockio``) — the definitions of ``docs/metrics.md`` are
unchanged (``t0``: hand-over to the client, connection set-up included; a token's
time: the read that completed its event).

What it keeps from the httpx path: TLS (the target's context, SNI, certificate
checks), the target's headers and basic auth, cookies (``http.cookiejar``
through httpx's jar, only once a response sets one), gzip/deflate bodies,
``--stall-timeout`` per read and ``--request-timeout`` (the caller's deadline),
the error classes, ``connect_s`` from ``loadtests.transport.connect``.  A response it
does not read (another transfer or content coding) raises ``h1.Unsupported``:
the caller records that request as ``protocol`` and sends the target's later
requests through httpx.
"""

from __future__ import annotations

import ssl
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from llmload.loadtests.measure.adapters.base import HttpCall
from llmload.loadtests.measure.caps import MAX_BODY_BYTES, body_over
from llmload.loadtests.measure.timing import StreamTimer
from llmload.loadtests.transport.connect import connector, readable_now
from llmload.loadtests.transport.framing import (
    MAX_HEAD,
    ChunkedDecoder,
    Head,
    ProtocolError,
    decoder,
    encode_json,
    header_block,
    parse_head,
    request_bytes,
)
from llmload.loadtests.transport.sockio import Conn, Failed, reason

clock = time.perf_counter
#: seconds an idle kept-alive connection is reused for (httpcore's keepalive_expiry)
KEEPALIVE_S = 5.0
#: request methods that carry a body (an empty one is sent with ``Content-Length: 0``)
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


@dataclass
class Origin:
    """Where one target's requests go and the header block they share (built once per target)."""

    scheme: str
    host: str
    port: int
    headers: list[tuple[str, str]]  # Host first, the target's and the client's defaults
    url_of: Callable[[str], httpx.URL]  # a call's path -> its full URL (prefix, query)
    ssl_context: Callable[[], ssl.SSLContext]
    connect_timeout: float
    #: what one response body may hold once decoded (``--max-body-bytes``)
    max_body: int = MAX_BODY_BYTES
    #: why this target's responses cannot be read here (then httpx serves it), once known
    unsupported: str | None = None
    _heads: dict[tuple, tuple[bytes, bytes]] = field(default_factory=dict, repr=False)

    def head(self, call: HttpCall) -> tuple[bytes, bytes]:
        """``(request target, header block)`` of ``call``: the shared part prepared once per
        path (and per set of call header names), the call's own headers added per request."""
        names = tuple(k.lower() for k in call.headers) if call.headers else ()
        key = (call.method, call.path, names, call.json is not None)
        hit = self._heads.get(key)
        if hit is None:
            merged = {name.lower(): (name, value) for name, value in self.headers}
            for name in names:  # the call's value replaces the target's
                merged.pop(name, None)
            if call.json is not None:
                merged["content-type"] = ("Content-Type", "application/json")
            hit = (self.url_of(call.path).raw_path, header_block(merged.values()))
            if len(self._heads) < 256:  # per-request paths (Gradio's event ids) are not kept
                self._heads[key] = hit
        if call.headers:
            return hit[0], hit[1] + header_block(call.headers.items())
        return hit


class Http1Client:
    """One simulated user's connection to the target: at most one idle, kept alive."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self._idle: Conn | None = None
        self._idle_since = 0.0
        self._cookies: httpx.Cookies | None = None
        #: the httpx client this user falls back to (``fallback``), once needed
        self._httpx: httpx.Client | None = None

    def __enter__(self) -> Http1Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the idle connection (and the fallback client, if any)."""
        if self._idle is not None:
            self._idle.close()
            self._idle = None
        if self._httpx is not None:
            self._httpx.close()

    def fallback(self, make: Callable[[], httpx.Client]) -> httpx.Client:
        """This user's httpx client, made on first use (a target the http1 path cannot read)."""
        if self._httpx is None:
            self._httpx = make()
        return self._httpx

    # -- one exchange ----------------------------------------------------------------------

    def send(self, call: HttpCall, timer: StreamTimer, read_timeout: float) -> None:
        """Send ``call``; feed ``timer`` (each read of a stream as it arrives, or the whole body).

        Raises ``Failed`` (a transport failure, with its error class),
        ``h1.ProtocolError``, ``h1.Unsupported``, ``zlib.error`` or ``OverCap`` (a body
        or an event over its cap; the connection is closed, not reused).
        """
        self._exchange(call, timer, read_timeout)

    def fetch(self, call: HttpCall, read_timeout: float) -> tuple[int, bytes]:
        """Send ``call`` and read its whole body: ``(status, body)``.  Raises as ``send``."""
        return self._exchange(call, None, read_timeout, whole=True)

    def _exchange(
        self, call: HttpCall, timer: StreamTimer | None, read_timeout: float, whole: bool = False
    ) -> tuple[int, bytes]:
        origin = self.origin
        target, block = origin.head(call)
        if self._cookies:
            block += header_block([("Cookie", self._cookie_header(call))])
        body = encode_json(call.json) if call.json is not None else None
        if body is None and call.method in _BODY_METHODS:
            body = b""
        data = request_bytes(call.method, target.decode("ascii"), block, body)
        conn = self._checkout(timer)
        reusable, head = False, None
        try:
            if call.stream and not whole:
                conn.begin(read_timeout, "stall", f"no bytes for {read_timeout:g}s")
            else:
                conn.begin(
                    read_timeout, "timeout", f"no complete response within {read_timeout:g}s"
                )
            conn.sendall(data)
            if timer is not None:
                timer.sent(clock())
            head, rest, t = _read_head(conn)
            if any(k == "set-cookie" for k, _ in head.headers):
                self._keep_cookies(call, head)
            if timer is not None:
                timer.headers(t, head.status)
            kind, length = head.framing(call.method)
            unzip = decoder(head.get("content-encoding"))
            cap = origin.max_body
            if call.stream and not whole and timer is not None:
                reusable = _read_body(conn, kind, length, rest, t, unzip, timer.feed, cap)
                return head.status, b""
            parts: list[bytes] = []
            reusable = _read_body(
                conn, kind, length, rest, t, unzip, lambda p, _t: parts.append(p), cap
            )
            payload = b"".join(parts)
            if timer is not None and not whole:
                timer.feed_body(payload, clock())
            return head.status, payload
        finally:
            conn.end()
            if reusable and head is not None and head.keep_alive:
                self._idle, self._idle_since = conn, clock()
            else:
                conn.close()

    # -- connections -----------------------------------------------------------------------

    def _checkout(self, timer: StreamTimer | None) -> Conn:
        """The idle connection if still good (fresh, nothing unread), else a new one."""
        conn, self._idle = self._idle, None
        if conn is not None:
            if clock() - self._idle_since < KEEPALIVE_S and not readable_now(conn.sock):
                return conn
            conn.close()
        origin = self.origin
        try:
            sock, seconds = connector().open(origin.host, origin.port, origin.connect_timeout)
        except TimeoutError as exc:
            raise Failed("connect", f"ConnectTimeout: {reason(exc)}") from None
        except OSError as exc:
            raise Failed("connect", f"ConnectError: {reason(exc)}") from None
        if origin.scheme == "https":
            started = clock()
            try:
                tls = origin.ssl_context().wrap_socket(
                    sock, server_hostname=origin.host, do_handshake_on_connect=False
                )
                tls.settimeout(origin.connect_timeout)
                tls.do_handshake()
            except (OSError, ValueError) as exc:
                sock.close()
                raise Failed("connect", f"ConnectError: {reason(exc)}") from None
            sock, seconds = tls, seconds + clock() - started
        if timer is not None:
            timer.connected(seconds)
        return Conn(sock)

    def _cookie_header(self, call: HttpCall) -> str:
        req = httpx.Request(call.method, self.origin.url_of(call.path))
        assert self._cookies is not None
        self._cookies.set_cookie_header(req)
        return req.headers.get("cookie", "")

    def _keep_cookies(self, call: HttpCall, head: Head) -> None:
        """Store a response's cookies (a sticky-session load balancer): http.cookiejar's rules."""
        if self._cookies is None:
            self._cookies = httpx.Cookies()
        req = httpx.Request(call.method, self.origin.url_of(call.path))
        resp = httpx.Response(head.status, headers=head.headers, request=req)
        self._cookies.extract_cookies(resp)


def _read_head(conn: Conn) -> tuple[Head, bytes, float]:
    """The response head (interim 1xx answers skipped), the bytes after it, its time."""
    buf, t = b"", clock()
    while True:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                raise ProtocolError("response head too large")
            data = conn.recv()
            t = conn.last
            if not data:
                raise Failed(
                    "disconnect",
                    "RemoteProtocolError: Server disconnected without sending a response.",
                )
            buf += data
            continue
        head = parse_head(buf[:end])
        buf = buf[end + 4 :]
        if 100 <= head.status < 200 and head.status != 101:
            continue  # an interim answer (100 Continue, 103 Early Hints): the real one follows
        return head, buf, t


def _read_body(
    conn: Conn,
    kind: str,
    length: int,
    rest: bytes,
    t: float,
    unzip: zlib._Decompress | None,
    sink: Callable[[bytes, float], None],
    cap: int = MAX_BODY_BYTES,
) -> bool:
    """Read one body, handing each read's payload to ``sink(payload, t)``; reusable after it?

    ``rest``: body bytes that came with the head, read at ``t``.  More than ``cap``
    bytes of payload (decoded: a small gzip body can decompress to gigabytes) raise
    ``OverCap`` before the sink sees them.
    """
    z = unzip
    left = cap  # payload bytes the sink may still be given

    def give(payload: bytes, t: float) -> None:
        nonlocal left
        if z is not None:  # never more than one byte past the cap out of the decompressor
            payload = z.decompress(payload, left + 1)
        left -= len(payload)
        if left < 0:
            raise body_over(cap)
        if payload:
            sink(payload, t)

    recv = conn.recv
    if kind == "none":
        reusable = not rest
    elif kind == "chunked":
        chunks = ChunkedDecoder()
        feed = chunks.feed
        if rest:
            give(feed(rest), t)
        while not chunks.done:  # the hot loop: one read, its payload, its time
            data = recv()
            if not data:
                raise Failed(
                    "disconnect",
                    "RemoteProtocolError: peer closed connection without "
                    "sending complete message body (incomplete chunked read)",
                )
            payload = feed(data)
            if payload:
                if z is None:
                    left -= len(payload)
                    if left < 0:
                        raise body_over(cap)
                    sink(payload, conn.last)
                else:
                    give(payload, conn.last)
        reusable = not chunks.extra
    elif kind == "length":
        if length > cap and z is None:
            raise body_over(cap)
        due = length
        if rest:
            give(rest[:due], t)
            due -= len(rest)
        while due > 0:
            data = recv()
            if not data:
                raise Failed(
                    "disconnect",
                    "RemoteProtocolError: peer closed connection without "
                    f"sending complete message body (received {length - due} bytes, "
                    f"expected {length})",
                )
            give(data[:due], conn.last)
            due -= len(data)
        reusable = due == 0
    else:  # close-delimited: the body ends with the connection
        if rest:
            give(rest, t)
        while data := recv():
            give(data, conn.last)
        reusable = False
    if z is not None:
        tail = z.flush()
        left -= len(tail)
        if left < 0:
            raise body_over(cap)
        if tail:
            sink(tail, conn.last)
    return reusable
