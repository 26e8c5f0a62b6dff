"""The incremental SSE parser: framing rules, any split of the byte stream."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmload.loadtests.measure.sse import SSEParser


def parse(*chunks: bytes, close: bool = True) -> list[tuple[str | None, str]]:
    p = SSEParser()
    out = []
    for c in chunks:
        out += p.feed(c)
    if close:
        out += p.close()
    return out


def test_one_event_per_read():
    assert parse(b"data: a\n\n", b"data: b\n\n") == [(None, "a"), (None, "b")]


def test_several_events_in_one_read():
    assert parse(b"data: 1\n\ndata: 2\n\ndata: 3\n\n") == [(None, "1"), (None, "2"), (None, "3")]


def test_event_split_across_reads_returns_nothing_until_complete():
    p = SSEParser()
    assert p.feed(b"da") == []
    assert p.feed(b"ta: hel") == []
    assert p.pending
    assert p.feed(b"lo\n") == []
    assert p.feed(b"\n") == [(None, "hello")]
    assert not p.pending


def test_byte_by_byte():
    raw = b'data: {"x": 1}\n\nevent: done\ndata: [DONE]\n\n'
    assert parse(*[raw[i : i + 1] for i in range(len(raw))]) == [
        (None, '{"x": 1}'),
        ("done", "[DONE]"),
    ]


def test_crlf_cr_and_lf_line_endings():
    assert parse(b"data: a\r\n\r\ndata: b\r\rdata: c\n\n") == [
        (None, "a"),
        (None, "b"),
        (None, "c"),
    ]


def test_crlf_split_between_reads_is_one_line_end():
    # "\r" ends one read, "\n" starts the next: one line end, not an empty line
    assert parse(b"data: a\r", b"\ndata: b\r\n\r\n") == [(None, "a\nb")]
    assert parse(b"data: a\r\n\r", b"\n") == [(None, "a")]


def test_comments_are_keepalives_not_events():
    p = SSEParser()
    assert p.feed(b": ping\n\n:\n\ndata: x\n\n") == [(None, "x")]
    assert p.comments == 2


def test_multiline_data_joins_with_newline():
    assert parse(b"data: line1\ndata: line2\ndata:\n\n") == [(None, "line1\nline2\n")]


def test_event_name_and_other_fields():
    raw = b"event: heartbeat\nid: 7\nretry: 100\ndata: null\n\ndata: next\n\n"
    assert parse(raw) == [("heartbeat", "null"), (None, "next")]


def test_only_one_leading_space_is_stripped_and_no_space_is_fine():
    assert parse(b"data:x\n\ndata:  y\n\n") == [(None, "x"), (None, " y")]


def test_field_without_colon():
    assert parse(b"data\n\n") == [(None, "")]


def test_blank_lines_without_data_dispatch_nothing():
    assert parse(b"\n\n\nevent: lonely\n\n") == []


def test_utf8_character_split_across_reads():
    raw = "data: 春天\n\n".encode()
    cut = raw.index("天".encode()) + 1  # inside the 3-byte character
    assert parse(raw[:cut], raw[cut:]) == [(None, "春天")]


def test_trailing_partial_event_at_eof():
    assert parse(b"data: a\n\ndata: [DONE]") == [(None, "a"), (None, "[DONE]")]
    assert parse(b"data: a\n\ndata: b\n") == [(None, "a"), (None, "b")]
    assert parse(b"data: a\n\ndata: b\n", close=False) == [(None, "a")]


def test_empty_chunks_are_harmless():
    assert parse(b"", b"data: a\r", b"", b"\n\n", b"") == [(None, "a")]


#: text a server can send: no line breaks inside a field, no lone surrogates (not encodable)
_field_text = st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",))
_lines = st.lists(
    st.one_of(
        st.text(alphabet=_field_text, max_size=12).map(lambda s: f"data: {s}"),
        st.sampled_from([": keepalive", "event: e", "", "id: 3"]),
    ),
    max_size=20,
)


@given(_lines, st.sampled_from(["\n", "\r\n", "\r"]), st.data())
def test_any_chunking_gives_the_same_events(lines, eol, data):
    raw = (eol.join(lines) + eol + eol).encode()
    whole = parse(raw)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=12)))
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    assert parse(*pieces) == whole


def test_named_events_one_per_read():
    """A named event that a read brings whole takes the fast path, which remembers the
    last name's lines; anything that does not fit them is framed line by line."""
    reads = [
        b"event: a\ndata: 1\n\n",
        b"event: a\ndata: 2\n\n",  # the name again: the remembered lines
        b"event: ab\ndata: 3\n\n",  # a longer name that starts with the last one
        b"event: a\ndata: 4\ndata: 5\n\n",  # the last name's lines, two data lines
        b"event: a\ndata:  6\n\n",  # one leading space stripped, not two
        b"event: a\nid: 7\ndata: 8\n\n",
        b"event: \ndata: 9\n\n",  # an empty name
        b"event: a\r\ndata: 10\r\n\r\n",
    ]
    assert parse(*reads) == [
        ("a", "1"),
        ("a", "2"),
        ("ab", "3"),
        ("a", "4\n5"),
        ("a", " 6"),
        ("a", "8"),
        ("", "9"),
        ("a", "10"),
    ]


_named_events = st.lists(
    st.tuples(
        st.sampled_from(["", "a", "ab", "a b", "ü"]),
        st.text(alphabet=_field_text, max_size=8),
        st.sampled_from(["", "id: 1\n", "data: more\n", ": c\n"]),
        st.booleans(),
    ),
    max_size=12,
)


@given(_named_events)
def test_named_events_one_per_read_read_as_byte_by_byte(events):
    reads = [
        (
            f"event: {name}\n{extra}data: {text}\n\n"
            if before
            else f"event: {name}\ndata: {text}\n{extra}\n"
        ).encode()
        for name, text, extra, before in events
    ]
    whole = parse(*reads)
    assert parse(*[bytes([b]) for r in reads for b in r]) == whole  # the line-by-line path
