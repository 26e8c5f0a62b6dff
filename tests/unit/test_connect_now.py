"""loadtests.transport.connect.connect_now: a TCP connect that stays on its greenlet when quick.

gevent's ``connect`` waits on the hub after every non-blocking connect, even on
loopback where the handshake is done at once: 20 users reconnecting together
all took ``t0``, then connected one after another.  ``connect_now`` must connect
(and fail) as ``connect`` does, without that switch.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator

import gevent
import pytest
from gevent import socket as gsocket

from llmload.loadtests.transport.connect import Connector, connect_now


def _switched_during(check: object) -> bool:
    ran: list[bool] = []
    gevent.spawn(lambda: ran.append(True))  # ready to run at the next switch to the hub
    check()  # type: ignore[operator]  # a checker returned by a factory the stubs leave open
    switched = bool(ran)
    gevent.sleep(0)
    return switched


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    yield srv
    srv.close()


def test_loopback_connect_without_a_switch_where_gevents_connect_switches(
    listener: socket.socket,
) -> None:
    addr = listener.getsockname()
    plain = gsocket.socket()
    plain.settimeout(5)
    assert _switched_during(lambda: plain.connect(addr))  # why connect_now exists
    plain.close()
    listener.accept()[0].close()  # that first connection

    sock = gsocket.socket()
    assert not _switched_during(lambda: connect_now(sock, addr, 5.0))
    assert sock.getpeername() == addr
    assert sock.gettimeout() == 5.0  # left as settimeout would
    sock.sendall(b"ping")
    peer, _ = listener.accept()
    assert peer.recv(4) == b"ping"
    peer.close()
    sock.close()


def test_refused_raises_like_connect(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    sock = gsocket.socket()
    with pytest.raises(OSError) as info:
        connect_now(sock, ("127.0.0.1", port), 5.0)
    assert info.value.errno == errno.ECONNREFUSED
    sock.close()


def test_connector_stream_carries_connect_time(listener: socket.socket) -> None:
    host, port = listener.getsockname()
    stream = Connector().connect_tcp(host, port, timeout=5.0)
    try:
        assert stream.connect_s is not None and stream.connect_s >= 0  # type: ignore[attr-defined]  # an attribute the stubs do not declare
        sock = stream.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        stream.close()
