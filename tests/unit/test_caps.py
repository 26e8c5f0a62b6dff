"""What one response may hold: the SSE event cap, the body cap, and what they cost.

The end-to-end checks (``llmload run`` against servers that never finish) are in
``tests/integration/test_endless_servers.py``; here the pieces, without sockets.
"""

from __future__ import annotations

import gzip
import time
import zlib
from typing import Any

import pytest

from llmload.loadtests.measure.caps import OverCap
from llmload.loadtests.measure.sse import SSEParser
from llmload.loadtests.options import RunOptions
from llmload.loadtests.sizes import format_size, parse_size
from llmload.loadtests.transport.http1 import _read_body


def test_sizes() -> None:
    assert parse_size("64MiB") == 64 * 1024 * 1024
    assert parse_size("1 MB") == 1_000_000
    assert parse_size("512k") == 512 * 1024
    assert parse_size(4096) == parse_size("4096") == 4096
    for bad in ("-1", "1.5.2MiB", "12 parsecs", ""):
        with pytest.raises(ValueError, match="bad size"):
            parse_size(bad)
    assert format_size(1024 * 1024) == "1 MiB" and format_size(1000) == "1000 bytes"


def test_the_caps_are_run_options() -> None:
    opts = RunOptions.of(max_event_bytes="256KiB", max_body_bytes="8MiB").validate()
    assert (opts.connection.max_event_bytes, opts.connection.max_body_bytes) == (
        256 * 1024,
        8 * 1024 * 1024,
    )
    with pytest.raises(ValueError, match="--max-event-bytes: bad size"):
        RunOptions.of(max_event_bytes="lots").validate()
    with pytest.raises(ValueError, match="--max-body-bytes must be positive"):
        RunOptions.of(max_body_bytes=0).validate()


def test_an_event_that_never_ends_is_cut_at_its_cap() -> None:
    p = SSEParser(max_event=1000)
    assert p.feed(b"data: ") == []
    with pytest.raises(OverCap, match=r"SSE event over --max-event-bytes \(1000 bytes\)"):
        for _ in range(100):
            p.feed(b"x" * 50)
    assert p.close() == []  # the request already ended: nothing half-read is dispatched


def test_data_lines_without_the_blank_line_count_too() -> None:
    p = SSEParser(max_event=1000)
    with pytest.raises(OverCap):
        for _ in range(100):
            p.feed(b"data: " + b"y" * 20 + b"\n")


def test_a_whole_event_over_the_cap_in_one_read_is_refused() -> None:
    with pytest.raises(OverCap):
        SSEParser(max_event=1000).feed(b"data: " + b"z" * 2000 + b"\n\n")
    # at the cap, and comments and events below it, go through as before
    p = SSEParser(max_event=1000)
    events = p.feed(b": keep-alive\n" * 200 + b"data: " + b"z" * 900 + b"\n\n")
    assert events == [(None, "z" * 900)] and p.comments == 200


def _feed_cpu(pieces: list[bytes]) -> float:
    p = SSEParser(max_event=1 << 40)
    t = time.process_time()
    for piece in pieces:
        p.feed(piece)
    return time.process_time() - t


def test_an_endless_line_costs_each_read_its_own_length() -> None:
    """A server trickling one line that never ends must not spin the client: each read
    costs its own bytes, as for complete lines (the old parser copied the whole line so
    far on every read — quadratic: 4,000 reads of 512 bytes took seconds)."""
    reads = 4000
    endless = [b"data: "] + [b"x" * 512] * reads
    lines = [b": " + b"c" * 509 + b"\n"] * (reads + 1)  # the same reads, each a whole line
    base = min(_feed_cpu(lines) for _ in range(3))
    cost = min(_feed_cpu(endless) for _ in range(3))
    assert cost < 3 * base + 0.01, (cost, base)


class _Conn:
    """What ``_read_body`` reads from: ``recv`` and the time of the last read."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads
        self.last = 0.0

    def recv(self) -> bytes:
        return self.reads.pop(0) if self.reads else b""


def _chunked(data: bytes, size: int = 4096) -> list[bytes]:
    parts = [data[i : i + size] for i in range(0, len(data), size)]
    return [b"%x\r\n%s\r\n" % (len(p), p) for p in parts] + [b"0\r\n\r\n"]


@pytest.mark.parametrize("kind", ["chunked", "length", "close"])
def test_a_body_over_its_cap_stops_before_the_sink_gets_more(kind: str) -> None:
    body = b"a" * 100_000
    reads = (
        _chunked(body)
        if kind == "chunked"
        else [body[i : i + 4096] for i in range(0, 100_000, 4096)]
    )
    got: list[bytes] = []
    with pytest.raises(OverCap, match=r"over --max-body-bytes \(64 KiB\)"):
        _read_body(
            _Conn(reads), kind, len(body), b"", 0.0, None, lambda b, _t: got.append(b), 65536
        )
    assert sum(map(len, got)) <= 65536
    # under the cap, the same body goes through whole
    whole: list[bytes] = []
    reads = _chunked(body) if kind == "chunked" else [body]
    _read_body(
        _Conn(reads), kind, len(body), b"", 0.0, None, lambda b, _t: whole.append(b), 1 << 20
    )
    assert b"".join(whole) == body


def test_a_gzip_bomb_is_cut_at_the_decoded_size() -> None:
    bomb = gzip.compress(b"\0" * (64 << 20))  # 64 MiB of zeros in ~64 KB
    got: list[Any] = []
    with pytest.raises(OverCap):
        _read_body(
            _Conn(_chunked(bomb)),
            "chunked",
            0,
            b"",
            0.0,
            zlib.decompressobj(zlib.MAX_WBITS | 16),
            lambda b, _t: got.append(len(b)),
            1 << 20,
        )
    assert sum(got) <= 1 << 20  # never more than the cap decoded into memory at once
