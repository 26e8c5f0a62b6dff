"""HTTP/1.1 on the wire, without sockets: the request head, the response head, body framing.

The pure half of the http1 client (``loadtests.transport.http1``): bytes in, bytes or values
out, so every split of a response can be tested without a server.  Only what
a streaming LLM client meets is parsed — the status line, the headers that
decide the body's framing and the connection's reuse, and the chunked transfer
coding (RFC 9112 §7.1); anything else is ``Unsupported``, and the caller falls
back to httpx for that target.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

#: a response head larger than this is refused (h11's default limit is 16 KiB)
MAX_HEAD = 64 * 1024
#: a chunk-size line (with extensions) longer than this is refused
MAX_SIZE_LINE = 4096


class ProtocolError(Exception):
    """The response broke HTTP/1.1 framing (recorded as ``disconnect``, as httpx's)."""


class Unsupported(Exception):
    """Valid HTTP that the http1 client does not read (a transfer or content coding)."""


def encode_json(body: object) -> bytes:
    """A JSON request body, encoded as httpx encodes ``json=`` (compact, UTF-8, no NaN)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def header_block(headers: Iterable[tuple[str, str]]) -> bytes:
    """``Name: value\\r\\n`` lines; a name or value that would split the head is refused."""
    out = []
    for name, value in headers:
        if not name or any(c in name for c in ":\r\n \t") or "\r" in value or "\n" in value:
            raise ValueError(f"invalid request header {name!r}")
        out.append(f"{name}: {value}\r\n")
    return "".join(out).encode("latin-1")


def request_bytes(method: str, target: str, head: bytes, body: bytes | None) -> bytes:
    """One request, ready for one send: request line, prepared header block, length, body."""
    line = f"{method} {target} HTTP/1.1\r\n".encode("latin-1")
    if body is None:
        return line + head + b"\r\n"
    return b"%s%sContent-Length: %d\r\n\r\n%s" % (line, head, len(body), body)


@dataclass(slots=True)
class Head:
    """A parsed response head: status, headers (names lower-cased, in order), framing."""

    status: int
    version: bytes
    headers: list[tuple[str, str]]
    #: each header's values, comma-joined (``get``)
    fields: dict[str, str]

    def get(self, name: str) -> str | None:
        """The values of header ``name`` (lower case), comma-joined; None if absent."""
        return self.fields.get(name)

    @property
    def keep_alive(self) -> bool:
        """May the connection carry another request once this body has ended?"""
        tokens = {t.strip().lower() for t in (self.get("connection") or "").split(",")}
        if self.version == b"HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens

    def framing(self, method: str) -> tuple[str, int]:
        """The body's framing (RFC 9112 §6.3): ``none``, ``length``, ``chunked`` or ``close``."""
        if method == "HEAD" or self.status in (204, 304) or 100 <= self.status < 200:
            return "none", 0
        te = self.get("transfer-encoding")
        if te is not None:
            codings = [c.strip().lower() for c in te.split(",") if c.strip()]
            if codings == ["chunked"]:
                return "chunked", 0
            raise Unsupported(f"Transfer-Encoding {te!r}")
        cl = self.get("content-length")
        if cl is not None:
            values = {v.strip() for v in cl.split(",")}
            if len(values) != 1 or not next(iter(values)).isdigit():
                raise ProtocolError(f"invalid Content-Length {cl!r}")
            length = int(values.pop())
            return ("length", length) if length else ("none", 0)
        return "close", 0


def parse_head(raw: bytes) -> Head:
    """The head ``raw`` (status line and header lines, without the blank line) as a ``Head``."""
    lines = raw.split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    code = rest[:3]
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or not code.isdigit() or rest[3:4] not in b" ":
        raise ProtocolError(f"invalid status line {lines[0][:80]!r}")
    headers = []
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise ProtocolError(f"invalid header line {line[:80]!r}")
        key, text = name.decode("latin-1").lower(), value.strip().decode("latin-1")
        headers.append((key, text))
        fields[key] = f"{fields[key]}, {text}" if key in fields else text
    return Head(int(code), version, headers, fields)


def decoder(content_encoding: str | None) -> zlib._Decompress | None:
    """A decompressor for the body's ``Content-Encoding`` (gzip, deflate), None for identity."""
    coding = (content_encoding or "identity").strip().lower()
    if coding in ("identity", ""):
        return None
    if coding in ("gzip", "x-gzip"):
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if coding == "deflate":
        return zlib.decompressobj()
    raise Unsupported(f"Content-Encoding {content_encoding!r}")


_HEX = b"0123456789abcdefABCDEF"


class ChunkedDecoder:
    """The chunked transfer coding, incrementally: feed bytes as read, get the payload back.

    ``done`` once the last chunk and the trailer section have been read;
    ``extra`` then holds any bytes that followed (a server that wrote more than
    one response: the connection must not be reused).
    """

    __slots__ = ("_buf", "_left", "_state", "done", "extra")

    def __init__(self) -> None:
        self._buf = b""
        self._left = 0  # payload bytes still due in the current chunk
        self._state = 0  # 0 size line, 1 payload, 2 CRLF after payload, 3 trailer lines
        self.done = False
        self.extra = b""

    def feed(self, data: bytes) -> bytes:
        """The payload carried by ``data``; raises ``ProtocolError`` on broken framing."""
        if self.done:
            self.extra += data
            return b""
        if self._state == 0 and not self._buf:  # fast path: one whole chunk, the usual read
            j = data.find(b"\r\n")
            if 0 < j <= 8 and not data[:j].strip(_HEX):
                n = int(data[:j], 16)
                end = j + 2 + n
                tail = data[end:]
                if n and (tail == b"\r\n" or tail == b"\r\n0\r\n\r\n"):  # maybe the last chunk
                    self.done = len(tail) == 7
                    return data[j + 2 : end]
        buf = self._buf + data if self._buf else data
        self._buf = b""
        out: list[bytes] = []
        i, n = 0, len(buf)
        while i < n:
            state = self._state
            if state == 1:
                end = i + self._left
                if end > n:
                    out.append(buf[i:])
                    self._left = end - n
                    break
                out.append(buf[i:end])
                i, self._left, self._state = end, 0, 2
            elif state == 2:
                if n - i < 2:
                    if buf[i:] != b"\r":
                        raise ProtocolError("chunk not followed by CRLF")
                    self._buf = buf[i:]
                    break
                if buf[i : i + 2] != b"\r\n":
                    raise ProtocolError("chunk not followed by CRLF")
                i, self._state = i + 2, 0
            else:
                j = buf.find(b"\n", i)
                if j < 0:
                    if n - i > MAX_SIZE_LINE:
                        raise ProtocolError("chunk-size line too long")
                    self._buf = buf[i:]
                    break
                line = buf[i:j]
                i = j + 1
                if line.endswith(b"\r"):
                    line = line[:-1]
                if state == 3:  # trailer section: ends at an empty line
                    if not line:
                        self.done = True
                        self.extra = buf[i:]
                        break
                    continue
                size = line.split(b";", 1)[0].strip()
                if not size or size.strip(_HEX):
                    raise ProtocolError(f"invalid chunk size {line[:40]!r}")
                left = int(size, 16)
                end = i + left
                if left and buf[end : end + 2] == b"\r\n":  # the whole chunk is here
                    out.append(buf[i:end])
                    i = end + 2
                    continue
                self._left = left
                self._state = 1 if left else 3
        return out[0] if len(out) == 1 else b"".join(out)
