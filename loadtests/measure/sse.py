"""An incremental Server-Sent Events parser: raw body bytes in, ``(event, data)`` pairs out.

Framing is done on bytes (WHATWG SSE rules): lines end in ``\\r\\n``, ``\\n`` or
``\\r``; a blank line dispatches the event; ``:`` lines are comments
(keep-alives); several ``data:`` lines join with ``\\n``; ``event:`` names the
event; ``id:``/``retry:`` and unknown fields are ignored.  Only complete lines
are decoded, so a UTF-8 character split across two reads is safe.

An event is capped (``max_event`` bytes, ``--max-event-bytes``): one that grows
past it before its end raises ``OverCap`` (``loadtests.measure.caps``).  The
unfinished line is kept as a list of the reads that brought it and joined once
its end arrives, so a line that never ends costs each read its own length, not
the length so far: a server trickling an endless event does not spin a core.
"""

from __future__ import annotations

from llmload.loadtests.measure.caps import MAX_EVENT_BYTES, OverCap, event_over

#: one parsed event: (``event:`` name or None, joined ``data:`` lines)
Event = tuple[str | None, str]


class SSEParser:
    """Feed it byte chunks exactly as read from the socket; it returns the events they complete."""

    __slots__ = (
        "_buf",
        "_buf_len",
        "_data",
        "_held",
        "_max",
        "_event",
        "_skip_lf",
        "_head",
        "_name",
        "_start",
        "comments",
    )

    def __init__(self, max_event: int = MAX_EVENT_BYTES) -> None:
        self._buf: list[bytes] = []  # the unfinished line, as the reads that brought it
        self._buf_len = 0
        self._data: list[bytes] = []
        self._held = 0  # bytes of the pending event's data lines
        self._max = max_event
        self._event: str | None = None
        # the previous chunk ended in "\r": a leading "\n" now belongs to that line end
        self._skip_lf = False
        # the last one-read named event's lines up to its data (b"event: NAME\ndata: "),
        # their length, and NAME: a stream repeats its names, so the next such event is one
        # ``startswith`` (the initial value is the empty name's, so it holds for any input)
        self._head = b"event: \ndata: "
        self._start = len(self._head)
        self._name = ""
        #: number of comment lines seen (keep-alives)
        self.comments = 0

    def feed(self, chunk: bytes) -> list[Event]:
        """Add bytes; return the events completed by them (possibly none)."""
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == 10:  # b"\n"
                chunk = chunk[1:]
                if not chunk:
                    return []
        if b"\r" in chunk:
            self._skip_lf = chunk[-1] == 13  # b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if (
            not self._buf
            and not self._data
            and self._event is None
            and chunk.endswith(b"\n\n")
            and len(chunk) <= self._max
        ):  # fast paths: whole events as one read brings them (the usual read)
            if chunk.startswith(b"data: "):  # single-line data events, one or a few
                if chunk.find(b"\n") == len(chunk) - 2:
                    return [(None, chunk[6:-2].decode("utf-8", "replace"))]
                parts = chunk[6:-2].split(b"\n\ndata: ")
                if chunk.count(b"\n") == 2 * len(parts):
                    return [(None, p.decode("utf-8", "replace")) for p in parts]
            elif chunk.startswith(self._head):  # one named event, named as the last one
                start = self._start
                if chunk.find(b"\n", start) == len(chunk) - 2:
                    return [(self._name, chunk[start:-2].decode("utf-8", "replace"))]
            elif chunk.startswith(b"event: "):  # one named event (Responses, Messages APIs)
                nl = chunk.find(b"\n")
                if chunk.find(b"\n", nl + 1) == len(chunk) - 2 and chunk.startswith(
                    b"data: ", nl + 1
                ):
                    self._head, self._start = chunk[: nl + 7], nl + 7
                    name = self._name = chunk[7:nl].decode("utf-8", "replace")
                    return [(name, chunk[nl + 7 : -2].decode("utf-8", "replace"))]
        end = chunk.rfind(b"\n")
        if end < 0:  # the line goes on: keep the read, join the line once it ends
            self._buf.append(chunk)
            self._buf_len += len(chunk)
            if self._buf_len + self._held > self._max:
                raise event_over(self._max)
            return []
        if self._buf:
            self._buf.append(chunk[:end])
            text = b"".join(self._buf)
        else:
            text = chunk[:end]
        rest = chunk[end + 1 :]
        self._buf = [rest] if rest else []
        self._buf_len = len(rest)
        out = self._lines(text.split(b"\n"))
        if self._buf_len + self._held > self._max:
            raise event_over(self._max)
        return out

    def close(self) -> list[Event]:
        """End of body: dispatch a trailing unterminated line and any pending event.

        An event already over the cap (its ``OverCap`` ended the request) is dropped."""
        lines = [b"".join(self._buf)] if self._buf else []
        self._buf = []
        self._buf_len = 0
        try:
            out = self._lines(lines)
        except OverCap:
            out = []
        if self._data:
            if self._held > self._max:
                self._data, self._held, self._event = [], 0, None
            else:
                out.append(self._dispatch())
        return out

    @property
    def pending(self) -> bool:
        """True while an event has started but is not yet complete."""
        return bool(self._buf or self._data)

    def _dispatch(self) -> Event:
        data = self._data
        text = data[0] if len(data) == 1 else b"\n".join(data)
        event = (self._event, text.decode("utf-8", "replace"))
        self._data = []
        self._held = 0
        self._event = None
        return event

    def _lines(self, lines: list[bytes]) -> list[Event]:
        out: list[Event] = []
        for line in lines:
            if not line:
                if self._data:
                    out.append(self._dispatch())
                else:
                    self._event = None
                continue
            if line.startswith(b"data:"):
                value = line[5:]
            elif line[0] == 58:  # b":" comment
                self.comments += 1
                continue
            else:
                field, sep, value = line.partition(b":")
                if field == b"event":
                    if value[:1] == b" ":
                        value = value[1:]
                    self._event = value.decode("utf-8", "replace")
                elif field == b"data":  # "data" with no colon: an empty data line
                    self._data.append(b"")
                    self._held += 1
                continue
            if value[:1] == b" ":
                value = value[1:]
            self._data.append(value)
            self._held += len(value) + 1  # and the newline that joins it to the next
            if self._held > self._max:
                raise event_over(self._max)
        return out
