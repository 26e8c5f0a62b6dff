"""loadtests.transport.connect.readable_now: httpcore's idle check, no greenlet switch.

gevent's ``select.poll`` waits on the hub even with a zero timeout, so a check made
before every request on a kept-alive connection let every other ready greenlet run
between a request's ``t0`` and its send (20 users started together sent one after
another). ``readable_now`` must give httpcore's answer and never switch.
"""

from __future__ import annotations

import socket

import gevent
import gevent.select

from llmload.loadtests.transport.connect import CoalescingStream, readable_now


def _switched_during(check: object) -> bool:
    ran: list[bool] = []
    gevent.spawn(lambda: ran.append(True))  # ready to run at the next switch to the hub
    check()  # type: ignore[operator]  # a checker returned by a factory the stubs leave open
    switched = bool(ran)
    gevent.sleep(0)  # let it run either way
    return switched


def test_answers_like_httpcore_idle_data_and_end() -> None:
    a, b = socket.socketpair()
    try:
        assert readable_now(a) is False  # idle: reusable
        b.sendall(b"x")
        assert readable_now(a) is True  # unexpected data: not reusable
        a.recv(1)
        b.close()
        assert readable_now(a) is True  # the peer closed: not reusable
    finally:
        a.close()
    assert readable_now(a) is True  # closed here (fileno -1)


def test_the_check_never_switches_greenlets_where_gevents_poll_does() -> None:
    a, b = socket.socketpair()
    try:

        def gevent_poll() -> None:
            p = gevent.select.poll()
            p.register(a.fileno(), 1)
            p.poll(0)

        assert _switched_during(gevent_poll)  # why readable_now exists
        assert not _switched_during(lambda: readable_now(a))
        stream = CoalescingStream(a)
        assert not _switched_during(lambda: stream.get_extra_info("is_readable"))
        assert stream.get_extra_info("is_readable") is False
    finally:
        a.close()
        b.close()
