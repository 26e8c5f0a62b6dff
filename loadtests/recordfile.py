"""``requests.jsonl``, plain or compressed as it is written: its name, writer and reader.

``--records-compression`` picks the file: ``none`` (``requests.jsonl``, flushed
line by line), ``gz`` (``requests.jsonl.gz``) or ``zst`` (``requests.jsonl.zst``,
zstandard).  An hour of records is ~1.7 GB of JSON lines; compressed it is a
fraction of that (BENCHMARKS.md, *An hour of records*).  A compressed file is
flushed every ``FLUSH_S`` seconds (a sync flush: all of it so far decodes), so a
run that is killed keeps its records up to the last flush; ``read_lines``
reads such a file up to where it ends instead of failing on its missing end.
The run writer (``loadtests.run.writer``) writes through ``RecordFile``;
``reports.table.loader`` finds and reads whichever one a run directory holds.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

COMPRESSIONS = ("none", "gz", "zst")
SUFFIX = {"none": "", "gz": ".gz", "zst": ".zst"}
STEM = "requests.jsonl"
#: seconds between flushes of a compressed file
FLUSH_S = 1.0
_READ = 1 << 20


def path_of(run_dir: Path, compression: str) -> Path:
    """Where a run's records go with this compression."""
    return run_dir / (STEM + SUFFIX[compression])


def find(run_dir: Path) -> Path | None:
    """The records file a run directory holds (plain first), or None."""
    for compression in COMPRESSIONS:
        path = path_of(run_dir, compression)
        if path.exists():
            return path
    return None


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError:  # a core dependency; a trimmed environment may lack it
        raise ValueError(
            "--records-compression zst needs the zstandard package (pip install zstandard)"
        ) from None
    return zstandard


class RecordFile:
    """Appends lines to a run's records file; ``close()`` ends it (a compressed frame too)."""

    def __init__(self, run_dir: Path, compression: str = "none") -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"records compression must be one of {', '.join(COMPRESSIONS)}")
        self.compression = compression
        self.path = path_of(run_dir, compression)
        for other in COMPRESSIONS:  # a directory reused for a new run starts over
            stale = path_of(run_dir, other)
            if other != compression and stale.exists():
                stale.unlink()
        self._raw: IO[bytes] | None = None
        self._text: IO[str] | None = None
        self._z: Any = None
        self._next_flush = time.monotonic() + FLUSH_S
        #: bytes on disk through the last whole line written (plain files: where a cut
        #: write is truncated back to; compressed: the stream as written so far)
        self.whole_bytes = 0
        if compression == "none":
            self._text = self.path.open("w", encoding="utf-8")
        elif compression == "gz":
            self._raw = self.path.open("wb")
            # level 1: in the writer's path, every record (level 6 cost ~5x plain's time
            # per record for a few % smaller files; BENCHMARKS.md, An hour of records)
            self._z = zlib.compressobj(1, zlib.DEFLATED, zlib.MAX_WBITS | 16)
        else:
            self._raw = self.path.open("wb")
            self._z = _zstd().ZstdCompressor(level=3).compressobj()

    def write(self, line: str) -> None:
        """One line (without its newline)."""
        if self._text is not None:
            data = line + "\n"
            self._text.write(data)
            self._text.flush()
            self.whole_bytes += len(data.encode("utf-8"))
            return
        assert self._raw is not None
        self._raw.write(self._z.compress((line + "\n").encode("utf-8")))
        if time.monotonic() >= self._next_flush:
            self.flush()

    def cut_back(self) -> None:
        """After a failed write: drop a half-written last line of a plain file (best effort:
        the file then ends with its last whole record); a compressed file keeps what
        decodes (its last sync flush)."""
        if self.compression != "none":
            return
        with contextlib.suppress(OSError):
            os.truncate(self.path, self.whole_bytes)

    def abandon(self) -> None:
        """Close without another write (the disk refused one): what is on disk stays."""
        for fh in (self._text, self._raw):
            if fh is not None:
                with contextlib.suppress(OSError, ValueError):
                    fh.close()
        self._text = self._raw = None

    def flush(self) -> None:
        """Everything written so far, decodable on disk."""
        if self._raw is not None:
            if self.compression == "gz":
                self._raw.write(self._z.flush(zlib.Z_SYNC_FLUSH))
            else:
                self._raw.write(self._z.flush(_zstd().COMPRESSOBJ_FLUSH_BLOCK))
            self._raw.flush()
            self._next_flush = time.monotonic() + FLUSH_S

    def close(self) -> None:
        if self._text is not None:
            self._text.close()
        elif self._raw is not None:
            self._raw.write(self._z.flush())
            self._raw.close()


def _decoded(path: Path) -> tuple[io.BufferedIOBase, tuple[type[BaseException], ...]]:
    """The file opened for reading its decoded bytes, and the errors a cut-off end raises."""
    raw = path.open("rb")
    if path.name.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw), (EOFError, OSError, zlib.error)
    if path.name.endswith(".zst"):
        zstd = _zstd()
        reader = zstd.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        return io.BufferedReader(reader, _READ), (zstd.ZstdError, EOFError, OSError)
    return raw, ()


def read_lines(path: Path) -> Iterator[bytes]:
    """The file's lines as bytes, streamed (decompressed as read).

    A compressed file cut short (a killed run: no end of stream) yields what
    decodes and stops there; a half-written last line comes out as it is, for the
    caller to count as corrupt.
    """
    fh, cut_short = _decoded(path)
    with fh:
        rest = b""
        while True:
            try:
                block = fh.read1(_READ)
            except cut_short:
                block = b""
            if not block:
                break
            lines = (rest + block).split(b"\n")
            rest = lines.pop()
            yield from lines
        if rest:
            yield rest
