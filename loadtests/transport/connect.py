"""How the load generator opens TCP connections: no resolver round trip, the request in one send.

Measured against a server that closes the connection after each response
(``bench harness``, close-delimited section), where every request opens a new
connection.  httpcore's default connect goes through ``socket.create_connection``,
which calls ``getaddrinfo`` — under gevent a hop to the resolver's thread pool
*even for an IP literal*.  That thread must win the GIL back from the busy
greenlet loop (up to the 5 ms switch interval), so with 20 streams reconnecting
together the first tokens arrived ~1 ms later per concurrent stream.  Here:

* ``Connector`` resolves each host once (IP literals never) and keeps the
  answer for ``DNS_TTL_S`` (a DNS-balanced target is re-resolved, not pinned),
  then connects the socket to the address directly; ``TCP_NODELAY`` as httpcore.
* ``CoalescingStream`` holds the request's writes (h11 hands over the head and
  the body separately) until the first read, so the request leaves in one send
  — one segment, one wake-up of the server — instead of two or three.  Its
  idle-connection check (``readable_now``) asks the kernel directly instead of
  through gevent's patched ``poll``, which switched greenlets before every
  request on a kept-alive connection.
* ``connect_now`` starts the TCP handshake and asks the kernel at once whether it
  is done (on loopback and a LAN it usually is): gevent's ``connect`` waited on
  the hub for every connection, so 20 users reconnecting together all took
  ``t0`` and then connected one after another (``bench harness --close``,
  first starts together: connect p50 ~10 ms).  Only a handshake still under
  way waits, cooperatively.

TLS is unchanged: httpcore wraps the returned stream with the *host name* (SNI
and certificate checks), and the ``Host`` header comes from the URL.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import select
import socket
import time
from collections.abc import Iterable
from typing import Any

import httpcore
from gevent import monkey
from httpcore._backends.sync import SyncStream  # the stream httpcore's own backend returns

#: seconds a resolved address is reused
DNS_TTL_S = 30.0
#: buffered request bytes sent without waiting for the first read (a large upload)
FLUSH_AT = 64 * 1024
#: the kernel's poll, whether or not gevent has patched ``select`` (see ``readable_now``)
_POLL = monkey.get_original("select", "poll")

Address = tuple[int, tuple[Any, ...]]  # (family, sockaddr)


class CoalescingStream(SyncStream):
    """A ``SyncStream`` whose writes go out together, at the first read.

    ``connect_s``: how long opening it took (TCP, plus TLS), until the request
    that opened it takes the figure (``take_connect_s``); None afterwards, so a
    request on a reused connection reports none.
    """

    def __init__(self, sock: socket.socket, connect_s: float | None = None) -> None:
        super().__init__(sock)
        self._pending: list[bytes] = []
        self._size = 0
        self.connect_s = connect_s

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        self._pending.append(buffer)
        self._size += len(buffer)
        if self._size >= FLUSH_AT:
            self.flush(timeout)

    def flush(self, timeout: float | None = None) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending, self._size = [], 0
            super().write(data, timeout)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.flush(timeout)
        return super().read(max_bytes, timeout)

    def close(self) -> None:
        self._pending, self._size = [], 0
        super().close()

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # asked before every request on a kept-alive connection
            return readable_now(self._sock)
        return super().get_extra_info(info)

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        """TLS on top, writes still coalesced (one TLS record for the request)."""
        self.flush(timeout)
        started = time.perf_counter()
        tls = super().start_tls(ssl_context, server_hostname, timeout)
        sock = tls.get_extra_info("socket")
        if not isinstance(tls, SyncStream) or sock is None:
            return tls
        return CoalescingStream(sock, (self.connect_s or 0.0) + time.perf_counter() - started)


def readable_now(sock: socket.socket) -> bool:
    """Is there data (or EOF) waiting on ``sock``? The kernel's answer, at once.

    httpcore asks this of an idle connection before reusing it (readable = the
    server closed it or sent something unexpected).  Its own check calls
    ``select.poll``, which gevent patches into a wait on the hub *even with a zero
    timeout*: every request on a kept-alive connection handed the CPU to every
    other ready greenlet between ``t0`` and its send.  Twenty users starting
    together therefore all took ``t0`` first and sent one after another — ~10 ms
    added to the last one's TTFT on this machine class.  The unpatched ``poll``
    answers without a switch.
    """
    fd = sock.fileno()
    if fd < 0:
        return True  # closed: as httpcore, the next read returns the end
    p = _POLL()
    p.register(fd, select.POLLIN)
    return bool(p.poll(0))


def writable_now(sock: socket.socket) -> bool:
    """Can ``sock`` be written (a connect finished, or failed)? The kernel's answer, at once."""
    p = _POLL()
    p.register(sock.fileno(), select.POLLOUT)
    return bool(p.poll(0))


def connect_now(sock: socket.socket, sockaddr: tuple[Any, ...], timeout: float | None) -> None:
    """Connect ``sock`` to ``sockaddr``, without a greenlet switch when the handshake is quick.

    A non-blocking connect returns "in progress" even on loopback, where the
    kernel finishes the handshake within microseconds; gevent's ``connect`` then
    hands the CPU to every other ready greenlet before it looks again.  Here the
    kernel is asked straight away; only a handshake still under way (a distant
    host) waits — through ``select.poll``, which gevent makes cooperative.
    Raises ``TimeoutError`` after ``timeout`` seconds, ``OSError`` on a refusal;
    leaves ``sock`` with ``timeout`` set, as ``sock.settimeout`` would.
    """
    sock.setblocking(False)
    err = sock.connect_ex(sockaddr)
    if err in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
        if not writable_now(sock):
            p = select.poll()  # gevent's when patched: the wait lets other greenlets run
            p.register(sock.fileno(), select.POLLOUT)
            if not p.poll(None if timeout is None else timeout * 1000):
                raise TimeoutError("timed out")
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err and err != errno.EISCONN:
        raise OSError(err, os.strerror(err))
    sock.settimeout(timeout)


def _ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``host`` as an IP address when it is one (``[::1]`` included), else None (a name)."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


class Connector(httpcore.SyncBackend):
    """httpcore network backend: cached resolution, direct connect, coalesced request writes."""

    def __init__(self, ttl: float = DNS_TTL_S) -> None:
        self.ttl = ttl
        self._cache: dict[tuple[str, int], tuple[float, list[Address]]] = {}
        #: resolver calls made (tests and the bench read it)
        self.lookups = 0

    def addresses(self, host: str, port: int) -> list[Address]:
        """Where ``host:port`` is: IP literals directly, names through the resolver, cached."""
        ip = _ip_literal(host)
        if ip is not None:
            family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            return [(family, (str(ip), port))]
        now = time.monotonic()
        hit = self._cache.get((host, port))
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        self.lookups += 1
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        found: list[Address] = [(int(fam), tuple(addr)) for fam, _, _, _, addr in infos]
        self._cache[(host, port)] = (now, found)
        return found

    def open(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> tuple[socket.socket, float]:
        """A connected TCP socket to ``host:port`` and the seconds it took.

        Raises ``TimeoutError`` (this address timed out) or ``OSError`` (no address
        answered, or the name did not resolve).  The http1 client (``loadtests.transport.http1``)
        uses it directly, httpcore through ``connect_tcp``.
        """
        addresses = self.addresses(host, port)
        last: OSError | None = None
        started = time.perf_counter()
        for family, sockaddr in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for option in socket_options or ():
                    sock.setsockopt(*option)
                if local_address is not None:
                    sock.bind((local_address, 0))
                connect_now(sock, sockaddr, timeout)
            except TimeoutError:
                sock.close()
                raise
            except OSError as exc:
                sock.close()
                last = exc
                continue
            if last is not None:  # an earlier address failed: try this one first next time
                self._prefer(host, port, (family, sockaddr))
            return sock, time.perf_counter() - started
        raise OSError(str(last) if last else f"no address for {host}")

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            sock, seconds = self.open(host, port, timeout, local_address, socket_options)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        return CoalescingStream(sock, seconds)

    def _prefer(self, host: str, port: int, address: Address) -> None:
        hit = self._cache.get((host, port))
        if hit is not None and address in hit[1]:
            rest = [a for a in hit[1] if a != address]
            self._cache[(host, port)] = (hit[0], [address, *rest])


def take_connect_s(stream: Any) -> float | None:
    """The set-up time of ``stream`` if this is the first request on it, else None."""
    seconds = getattr(stream, "connect_s", None)
    if seconds is not None:
        stream.connect_s = None
    return seconds


_CONNECTOR: Connector | None = None


def connector() -> Connector:
    """This process's one connector (one address cache for every simulated user)."""
    global _CONNECTOR
    if _CONNECTOR is None:
        _CONNECTOR = Connector()
    return _CONNECTOR
