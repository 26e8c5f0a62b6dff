"""An incremental Server-Sent Events parser: raw body bytes in, ``(event, data)`` pairs out.

Framing is done on bytes (WHATWG SSE rules): lines end in ``\\r\\n``, ``\\n`` or
``\\r``; a blank line dispatches the event; ``:`` lines are comments
(keep-alives); several ``data:`` lines join with ``\\n``; ``event:`` names the
event; ``id:``/``retry:`` and unknown fields are ignored.  Only complete lines
are decoded, so a UTF-8 character split across two reads is safe.
"""

from __future__ import annotations

#: one parsed event: (``event:`` name or None, joined ``data:`` lines)
Event = tuple[str | None, str]


class SSEParser:
    """Feed it byte chunks exactly as read from the socket; it returns the events they complete."""

    __slots__ = ("_buf", "_data", "_event", "_skip_lf", "comments")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self._event: str | None = None
        # the previous chunk ended in "\r": a leading "\n" now belongs to that line end
        self._skip_lf = False
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
            and chunk.startswith(b"data: ")
            and chunk.endswith(b"\n\n")
        ):  # fast path: whole single-line data events (the usual read, one or a few events)
            if chunk.find(b"\n") == len(chunk) - 2:
                return [(None, chunk[6:-2].decode("utf-8", "replace"))]
            parts = chunk[6:-2].split(b"\n\ndata: ")
            if chunk.count(b"\n") == 2 * len(parts):
                return [(None, p.decode("utf-8", "replace")) for p in parts]
        buf = self._buf + chunk if self._buf else chunk
        end = buf.rfind(b"\n")
        if end < 0:
            self._buf = buf
            return []
        self._buf = buf[end + 1 :]
        return self._lines(buf[:end].split(b"\n"))

    def close(self) -> list[Event]:
        """End of body: dispatch a trailing unterminated line and any pending event."""
        lines = [self._buf] if self._buf else []
        self._buf = b""
        out = self._lines(lines)
        if self._data:
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
                continue
            if value[:1] == b" ":
                value = value[1:]
            self._data.append(value)
        return out
