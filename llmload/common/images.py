"""PNG images as the load generator writes them and the bundled server reads them.

The harness sends generated images (``loadtests.workload.images``); the bundled
server counts their prompt tokens from their size (``target_server.images``).
Only what both need is here: writing an RGB PNG, and reading a PNG's size from
its header.
"""

from __future__ import annotations

import struct
import zlib

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png(width: int, height: int, pixels: bytes) -> bytes:
    """An RGB PNG of ``pixels`` (``width * height * 3`` bytes), stored uncompressed."""
    row = width * 3
    raw = b"".join(b"\x00" + pixels[y * row : (y + 1) * row] for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        PNG_SIGNATURE
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 0))
        + chunk(b"IEND", b"")
    )


def png_size(data: bytes) -> tuple[int, int] | None:
    """A PNG's width and height from its header, or None for anything else."""
    if len(data) >= 24 and data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return width, height
    return None
