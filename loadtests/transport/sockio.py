"""The http1 client's socket reads and writes: no timer object per read under gevent.

gevent's socket with a timeout arms a new ``gevent.Timeout`` every time a read
has to wait, and first tries the read, failing with ``EWOULDBLOCK`` (an
exception) before it waits: per SSE event, a timer object, an exception and two
``recv`` calls (their share of the load generator's CPU at 1,000 streams, py-spy:
``docs/scale.md``, *The load generator*).  Here, under gevent, a connection waits
on its own read watcher (made once per connection) and then reads once; the stall and
request-read limits are enforced by one ``Watchdog`` greenlet per process that
looks at every connection's last progress a few times per limit, and throws
``Failed`` into a connection whose wait has lasted too long — the same exception
a timer would have raised, at the same place.  Without gevent (threads, tests)
the socket's own timeout does the job.

A read's time is when its bytes reached this host, not when this process got
round to reading them: plain TCP sockets ask the kernel for receive timestamps
(``SO_TIMESTAMPNS``; for TCP a read carries the stamp of the last segment it
took), and the time a read returns is moved back by how long the data waited —
measured on the wall clock, both ends read back to back, applied to the
monotonic one.  At 1,000 streams on one core the data of a read waited for the
hub's turn, behind other users' requests: that wait was the load generator's
TTFT tail (``docs/scale.md``).  Without a stamp (TLS, threads, a kernel that
gives none) the read's own time stands.
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
import sys
import time
from typing import Any

import gevent
from gevent import get_hub, getcurrent

clock = time.perf_counter
wall_ns = time.time_ns
#: bytes asked of the kernel per read: one read takes whatever has arrived
RECV_SIZE = 256 * 1024
#: SO_TIMESTAMPNS (not in Python's socket module); its value on Linux's generic
#: socket ABI (x86, arm, riscv...), where the stamp is a native ``struct timespec``
SO_TIMESTAMPNS = 35 if sys.platform == "linux" and struct.calcsize("l") == 8 else None
_ANC_SIZE = socket.CMSG_SPACE(16) if SO_TIMESTAMPNS is not None else 0
_timespec = struct.Struct("qq").unpack_from
#: a wait longer than this is a clock step, not a wait: the read's own time stands
MAX_WAIT_NS = 10_000_000_000
#: ``LLMLOAD_RECV_STAMPS=0``: time reads when they return (the bench's comparison row)
STAMPS = os.environ.get("LLMLOAD_RECV_STAMPS", "1") != "0"


class Failed(Exception):
    """A transport failure: ``status`` is the record's error class, ``args[0]`` the reason."""

    def __init__(self, status: str, error: str) -> None:
        super().__init__(error)
        self.status = status


class Conn:
    """One connection: its socket, and under gevent its read watcher and limit bookkeeping."""

    __slots__ = (
        "sock",
        "tls",
        "_io",
        "_hub",
        "_raw",
        "_stamped",
        "last",
        "limit",
        "on_limit",
        "glet",
        "waited",
    )

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.tls = isinstance(sock, ssl.SSLSocket)
        self._io: Any = None
        self._hub: Any = None
        self._raw: Any = None
        self._stamped = False
        if type(sock).__module__.startswith("gevent"):  # a cooperative socket: wait on the hub
            sock.settimeout(None)  # no gevent.Timeout per wait: the watchdog keeps the limits
            self._hub = get_hub()
            self._io = self._hub.loop.io(sock.fileno(), 1)
            if not self.tls:  # the kernel socket under gevent's (non-blocking): read it directly
                self._raw = getattr(sock, "_sock", None)
                self._stamped = self._raw is not None and _ask_stamps(self._raw)
        self.last = 0.0  # when the exchange last made progress (a read's data arrived)
        self.limit = 0.0  # seconds without progress before ``on_limit`` fails it
        self.on_limit = ("stall", "")
        self.waited = 0.0  # how long the last read's data waited for this process (s)
        self.glet: Any = None

    def close(self) -> None:
        if self._io is not None:
            self._io.close()
            self._io = None
        self.sock.close()

    def begin(self, limit: float, status: str, message: str) -> None:
        """Reads and writes from now on fail as ``status`` after ``limit`` s without progress."""
        self.last = clock()
        self.limit = limit
        self.on_limit = (status, message)
        if self._io is None:
            self.sock.settimeout(limit)
        else:
            self.glet = getcurrent()
            WATCHDOG.watch(self)

    def end(self) -> None:
        """The exchange is over: no more limits on this connection."""
        if self._io is not None:
            WATCHDOG.unwatch(self)
            self.glet = None

    def sendall(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except TimeoutError:
            raise Failed("timeout", "WriteTimeout: the request could not be sent") from None
        except OSError as exc:
            raise Failed("disconnect", f"WriteError: {reason(exc)}") from None

    def recv(self) -> bytes:
        """One read (``last`` = when it returned); a limit hit is ``Failed``, a reset a
        ``disconnect``; a TLS peer that closed without close_notify reads as the end."""
        raw = self._raw
        if raw is not None:  # plain TCP under gevent: wait for the read watcher, read once
            try:
                while True:
                    self._hub.wait(self._io)
                    try:
                        if not self._stamped:
                            data: bytes = raw.recv(RECV_SIZE)
                            self.last = clock()
                            return data
                        data, anc, _flags, _addr = raw.recvmsg(RECV_SIZE, _ANC_SIZE)
                    except BlockingIOError:  # woken with nothing to read: wait again
                        continue
                    wall, now = wall_ns(), clock()
                    waited = 0
                    if anc:  # [(SOL_SOCKET, SO_TIMESTAMPNS, struct timespec)]
                        sec, nsec = _timespec(anc[0][2])
                        waited = wall - sec * 1_000_000_000 - nsec
                        if not 0 < waited < MAX_WAIT_NS:
                            waited = 0
                    self.waited = waited * 1e-9
                    self.last = now - self.waited
                    return data
            except OSError as exc:
                raise Failed("disconnect", f"ReadError: {reason(exc)}") from None
        sock = self.sock
        try:
            if self._io is not None and not (self.tls and sock.pending()):  # type: ignore[attr-defined]  # gevent's SSL socket has pending(); its stubs do not say so
                self._hub.wait(self._io)
            data = sock.recv(RECV_SIZE)
        except TimeoutError:
            raise Failed(*self.on_limit) from None
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
            data = b""
        except OSError as exc:
            raise Failed("disconnect", f"ReadError: {reason(exc)}") from None
        self.last = clock()
        return data


def _ask_stamps(raw: Any) -> bool:
    """Ask the kernel to stamp ``raw``'s received data; whether it took the option."""
    if SO_TIMESTAMPNS is None or not STAMPS:
        return False
    try:
        raw.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


class Watchdog:
    """One greenlet that fails the connections whose wait has outlasted their limit."""

    def __init__(self) -> None:
        self._conns: set[Conn] = set()
        self._glet: Any = None
        self._tick = 1.0

    def watch(self, conn: Conn) -> None:
        self._conns.add(conn)
        self._tick = min(self._tick, max(0.005, conn.limit / 20))
        if self._glet is None or self._glet.dead:
            self._glet = gevent.spawn(self._run)

    def unwatch(self, conn: Conn) -> None:
        self._conns.discard(conn)

    def _run(self) -> None:
        loop = get_hub().loop
        while self._conns:
            gevent.sleep(self._tick)
            now = clock()
            for conn in [c for c in self._conns if now - c.last > c.limit]:
                self._conns.discard(conn)
                loop.run_callback(self._fire, conn, conn.glet)

    @staticmethod
    def _fire(conn: Conn, glet: Any) -> None:
        """From the hub, as a ``gevent.Timeout`` fires: only into the same, unfinished exchange."""
        if glet is not None and conn.glet is glet:
            glet.throw(Failed(*conn.on_limit))


WATCHDOG = Watchdog()


def reason(exc: BaseException) -> str:
    """The first line of an exception's message, or its type's name."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return text or type(exc).__name__
