"""loadtests.transport.framing: HTTP/1.1 wire format: chunked framing, SSE split anywhere, heads."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.loadtests.measure.sse import SSEParser
from llmload.loadtests.transport.framing import (
    ChunkedDecoder,
    ProtocolError,
    Unsupported,
    decoder,
    encode_json,
    header_block,
    parse_head,
    request_bytes,
)


def chunked(payloads: list[bytes], ext: bool = False, trailer: bytes = b"") -> bytes:
    """``payloads`` in the chunked coding (empty ones skipped: a 0 chunk ends the body)."""
    out = b"".join(b"%x%s\r\n%s\r\n" % (len(p), b";x=1" if ext else b"", p) for p in payloads if p)
    return out + b"0\r\n" + trailer + b"\r\n"


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:], strict=False)]


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=40), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
    ext=st.booleans(),
    trailer=st.sampled_from([b"", b"x-trailer: 1\r\n"]),
    after=st.sampled_from([b"", b"HTTP/1.1 200 OK\r\n"]),
)
def test_chunked_split_anywhere_gives_the_payload(
    payloads: list[bytes], cuts: list[int], ext: bool, trailer: bytes, after: bytes
) -> None:
    wire = chunked(payloads, ext, trailer) + after
    dec = ChunkedDecoder()
    got = b"".join(dec.feed(piece) for piece in split_at(wire, cuts))
    assert got == b"".join(payloads)
    assert dec.done and dec.extra == after


def test_chunked_not_done_until_the_last_chunk() -> None:
    dec = ChunkedDecoder()
    assert dec.feed(b"5\r\nhello\r\n") == b"hello"
    assert not dec.done
    assert dec.feed(b"0\r\n") == b"" and not dec.done  # trailer section still open
    dec.feed(b"\r\n")
    assert dec.done and dec.extra == b""
    # one read = one whole chunk (the usual read), or the last one with the end of the body
    whole = ChunkedDecoder()
    assert whole.feed(b"5\r\nhello\r\n") == b"hello" and not whole.done
    assert whole.feed(b"3\r\nabc\r\n0\r\n\r\n") == b"abc" and whole.done
    assert whole.extra == b""


@pytest.mark.parametrize(
    "wire",
    [b"zz\r\nhello\r\n", b"5\r\nhelloXX", b"\r\n", b"-1\r\n", b"5 5\r\nhello\r\n"],
)
def test_broken_chunk_framing_is_a_protocol_error(wire: bytes) -> None:
    with pytest.raises(ProtocolError):
        ChunkedDecoder().feed(wire)


sse_text = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"), max_size=20
)


@settings(max_examples=200, deadline=None)
@given(
    datas=st.lists(sse_text, min_size=1, max_size=6),
    chunk_cuts=st.lists(st.integers(min_value=0, max_value=5_000), max_size=6),
    read_cuts=st.lists(st.integers(min_value=0, max_value=5_000), max_size=10),
)
def test_sse_through_chunked_split_anywhere(
    datas: list[str], chunk_cuts: list[int], read_cuts: list[int]
) -> None:
    """Events framed in chunks cut anywhere, read in pieces cut anywhere: the same events."""
    stream = b"".join(b"data: " + d.encode() + b"\n\n" for d in datas)
    wire = chunked(split_at(stream, chunk_cuts))
    dec, parser, events = ChunkedDecoder(), SSEParser(), []
    for piece in split_at(wire, read_cuts):
        events += parser.feed(dec.feed(piece))
    assert dec.done
    assert [data for _, data in events] == datas


def test_heads_and_framing() -> None:
    head = parse_head(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2"
    )
    assert head.status == 200 and head.keep_alive
    assert head.framing("POST") == ("chunked", 0)
    assert head.get("set-cookie") == "a=1, b=2"
    assert parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 12").framing("POST") == ("length", 12)
    assert parse_head(b"HTTP/1.1 204 No Content").framing("POST") == ("none", 0)
    assert parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 0").framing("GET") == ("none", 0)
    close = parse_head(b"HTTP/1.1 200 OK\r\nconnection: close")
    assert close.framing("POST") == ("close", 0) and not close.keep_alive
    assert not parse_head(b"HTTP/1.0 200 OK").keep_alive
    assert parse_head(b"HTTP/1.0 200 OK\r\nConnection: keep-alive").keep_alive
    assert parse_head(b"HTTP/1.1 500").status == 500  # no reason phrase


def test_what_the_lean_client_does_not_read() -> None:
    with pytest.raises(Unsupported):
        parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked").framing("POST")
    with pytest.raises(Unsupported):
        decoder("br")
    for bad in (b"HTTP/2 200", b"HTTP/1.1 2x0 OK", b"HTTP/1.1 200 OK\r\n folded: x"):
        with pytest.raises(ProtocolError):
            parse_head(bad)
    with pytest.raises(ProtocolError):
        parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 3, 4").framing("POST")


def test_gzip_and_deflate_bodies() -> None:
    body = b"data: hello\n\n" * 20
    gz = zlib.compressobj(wbits=zlib.MAX_WBITS | 16)
    z = decoder("gzip")
    assert z is not None
    wire = gz.compress(body) + gz.flush()
    pieces = [z.decompress(wire[i : i + 7]) for i in range(0, len(wire), 7)]
    assert b"".join(pieces) + z.flush() == body
    d = decoder("deflate")
    assert d is not None and d.decompress(zlib.compress(body)) == body
    assert decoder(None) is None and decoder("identity") is None


def test_request_bytes() -> None:
    block = header_block([("Host", "h:1"), ("Authorization", "Bearer x")])
    body = encode_json({"a": "春", "b": [1, 2]})
    assert body == '{"a":"春","b":[1,2]}'.encode()
    wire = request_bytes("POST", "/v1/chat", block, body)
    head, _, rest = wire.partition(b"\r\n\r\n")
    length = b"Content-Length: %d" % len(body)
    assert head.split(b"\r\n") == [
        b"POST /v1/chat HTTP/1.1",
        b"Host: h:1",
        b"Authorization: Bearer x",
        length,
    ]
    assert rest == body
    assert request_bytes("GET", "/v1/models", block, None).endswith(b"Bearer x\r\n\r\n")
    with pytest.raises(ValueError, match="invalid request header"):
        header_block([("X-Evil", "a\r\nInjected: 1")])
