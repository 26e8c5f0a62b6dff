"""PNG images as the load generator writes them and the bundled server reads them.

The harness sends generated images (``loadtests.workload.images``); the bundled
server counts their prompt tokens from their size (``target_server.images``), and
the harness's context fit counts them the same way before it sends them
(``loadtests.workload.fit``).  Only what both need is here: writing an RGB PNG,
reading a PNG's size from its header, and the rule for an image's prompt tokens.

The rule: a PNG costs one token per 28×28-pixel patch (``ceil(W/28) *
ceil(H/28)``: Qwen2-VL's merged patch), read from its header; any other image (a
JPEG, a URL nobody fetches) ``OTHER_IMAGE_TOKENS``.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
import zlib

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: pixels per side of the patch that is one prompt token
PATCH_PX = 28
#: the tokens of an image whose size is not read
OTHER_IMAGE_TOKENS = 256


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


def tokens_of_png(width: int, height: int) -> int:
    return math.ceil(width / PATCH_PX) * math.ceil(height / PATCH_PX)


def tokens_of_base64(data: str) -> int:
    """Tokens of a base64 image: its PNG header decoded (32 characters), else the default."""
    try:
        head = base64.b64decode(data[:32], validate=True)
    except (binascii.Error, ValueError):
        return OTHER_IMAGE_TOKENS
    size = png_size(head)
    return tokens_of_png(*size) if size else OTHER_IMAGE_TOKENS


def tokens_of_url(url: str) -> int:
    """Tokens of an image given by URL: a ``data:…;base64,`` URL is read, another is not."""
    head, sep, data = url.partition(",")
    if url.startswith("data:") and sep and head.endswith(";base64"):
        return tokens_of_base64(data)
    return OTHER_IMAGE_TOKENS
