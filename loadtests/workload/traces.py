"""Production traces as published (``--dataset trace FILE``): read, checked, told apart by content.

Three formats, each as its owners publish it (no conversion step):

* **Mooncake** JSONL — one object a line: ``timestamp`` (milliseconds since the
  trace began), ``input_length``, ``output_length`` and optionally ``hash_ids``:
  one id per block of ``MOONCAKE_BLOCK`` (512) prompt tokens, the same id where
  two requests share that block of prompt (and everything before it).  Other keys
  are ignored.
* **BurstGPT** CSV — header with ``Timestamp`` (seconds), ``Request tokens`` and
  ``Response tokens`` (``Model``, ``Total tokens``, ``Log Type``, ... ignored).  Its
  failed requests, ``Response tokens`` 0, are skipped and counted.
* **Azure LLM inference** CSV — header ``TIMESTAMP`` (a date and time, e.g.
  ``2023-11-16 18:15:46.6805900``, optionally with a UTC offset),
  ``ContextTokens``, ``GeneratedTokens``.  Rows with 0 generated tokens are skipped
  and counted, as BurstGPT's.

A file starting with ``{`` is Mooncake; a CSV is told by its header.  Times are
made relative to the earliest request; requests are replayed in time order (a
stable sort: equal times keep the file's order).  Anything else — a line that is
not JSON or not a row of the header's width, a missing, negative or non-integer
count, a bad time, ``hash_ids`` that do not fit ``input_length`` — raises
``TraceError`` naming ``FILE:LINE`` and what is wrong, before any load.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

#: prompt tokens per ``hash_ids`` entry in the Mooncake traces
MOONCAKE_BLOCK = 512
FORMATS = ("mooncake", "burstgpt", "azure")
_BURSTGPT = ("Timestamp", "Request tokens", "Response tokens")
_AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_AZURE_TIME = re.compile(
    r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?"
)


class TraceError(ValueError):
    """A trace that cannot be replayed; the message names ``FILE:LINE`` and the fault."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace: when (seconds from the trace's first request) and how long."""

    line: int
    at_s: float
    input_len: int
    output_len: int
    #: Mooncake: one id per ``MOONCAKE_BLOCK`` prompt tokens (shared ids: a shared prefix)
    hash_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Trace:
    """A trace file read: its format, its requests in time order, what was skipped."""

    path: Path
    format: str
    requests: tuple[TraceRequest, ...]
    #: rows left out, by reason (BurstGPT's failed requests: ``"no output tokens"``)
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def span_s(self) -> float:
        """Seconds from the first request to the last."""
        return self.requests[-1].at_s if self.requests else 0.0


def read_trace(path: Path | str) -> Trace:
    """Read and check a trace file (``TraceError`` with ``FILE:LINE`` on the first bad line)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read trace: {exc}") from None
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if not first:
        raise TraceError(f"{path}: the trace is empty")
    skipped: dict[str, int] = {}
    if first.startswith("{"):
        kind, rows = "mooncake", _mooncake(path, text)
    else:
        kind, rows = _csv(path, text, skipped)
    if not rows:
        raise TraceError(f"{path}: no request to replay ({_skipped_text(skipped)})")
    rows.sort(key=lambda r: r[1])
    t0 = rows[0][1]
    requests = tuple(
        TraceRequest(line, at - t0, n_in, n_out, ids) for line, at, n_in, n_out, ids in rows
    )
    return Trace(path, kind, requests, skipped)


def _skipped_text(skipped: dict[str, int]) -> str:
    return ", ".join(f"{n} skipped: {why}" for why, n in skipped.items()) or "no rows"


_Row = tuple[int, float, int, int, "tuple[int, ...] | None"]


def _count(value: Any, name: str, minimum: int = 1) -> int:
    """A token count: an integer (``12`` or ``"12"`` or ``12.0``) of at least ``minimum``."""
    number: Any = value
    if isinstance(value, str):
        try:
            number = float(value.strip()) if value.strip() else None
        except ValueError:
            raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not math.isfinite(number) or number != int(number):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(number)


def _seconds(value: Any, name: str, scale: float = 1.0) -> float:
    """A non-negative time in the trace's unit, as seconds."""
    number: Any = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {value!r}") from None
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(number) * scale


def _mooncake(path: Path, text: str) -> list[_Row]:
    rows: list[_Row] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
            missing = [k for k in ("timestamp", "input_length", "output_length") if k not in obj]
            if missing:
                raise ValueError(f"missing {', '.join(missing)} (a Mooncake trace line)")
            at = _seconds(obj["timestamp"], "timestamp", 0.001)
            n_in = _count(obj["input_length"], "input_length")
            n_out = _count(obj["output_length"], "output_length")
            ids = _hash_ids(obj.get("hash_ids"), n_in)
        except ValueError as exc:
            raise TraceError(f"{path}:{lineno}: {exc}") from None
        rows.append((lineno, at, n_in, n_out, ids))
    return rows


def _hash_ids(value: Any, n_in: int) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in value
    ):
        raise ValueError("hash_ids must be a list of integers >= 0")
    need = math.ceil(n_in / MOONCAKE_BLOCK)
    if len(value) != need:
        raise ValueError(
            f"input_length {n_in} is {need} block(s) of {MOONCAKE_BLOCK} tokens, "
            f"but hash_ids has {len(value)}"
        )
    return tuple(value)


def _csv(path: Path, text: str, skipped: dict[str, int]) -> tuple[str, list[_Row]]:
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader)]
    if all(h in header for h in _BURSTGPT):
        kind, cols = "burstgpt", _BURSTGPT
    elif all(h in header for h in _AZURE):
        kind, cols = "azure", _AZURE
    else:
        raise TraceError(
            f"{path}:1: not a trace format llmload reads: a Mooncake JSONL line, or a CSV "
            f"header with {', '.join(_BURSTGPT)} (BurstGPT) or {', '.join(_AZURE)} (Azure); "
            f"got {', '.join(header)[:200]!r}"
        )
    at_i, in_i, out_i = (header.index(c) for c in cols)
    rows: list[_Row] = []
    base: datetime | None = None
    for row in reader:
        lineno = reader.line_num
        if not row or not any(cell.strip() for cell in row):
            continue
        try:
            if len(row) != len(header):
                raise ValueError(f"{len(row)} fields, the header has {len(header)}")
            if kind == "azure":
                when = _azure_time(row[at_i])
                base = base or when
                at = (when - base).total_seconds()  # may be < 0: made relative after the sort
            else:
                at = _seconds(row[at_i], "Timestamp")
            n_in = _count(row[in_i], cols[1], minimum=0)
            n_out = _count(row[out_i], cols[2], minimum=0)
        except ValueError as exc:
            raise TraceError(f"{path}:{lineno}: {exc}") from None
        why = "no output tokens" if n_out == 0 else "no prompt tokens" if n_in == 0 else None
        if why:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        rows.append((lineno, at, n_in, n_out, None))
    return kind, rows


def _azure_time(value: str) -> datetime:
    m = _AZURE_TIME.fullmatch(value.strip())
    if not m:
        raise ValueError(
            f"TIMESTAMP must be a date and time (2023-11-16 18:15:46.68), got {value!r}"
        )
    date, clock, frac, zone = m.groups()
    try:
        when = datetime.strptime(f"{date} {clock}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise ValueError(f"TIMESTAMP is not a valid date and time: {value!r}") from None
    if frac:
        when += timedelta(microseconds=round(float("0." + frac) * 1e6))
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        hours, minutes = int(zone[1:3]), int(zone[-2:])
        when -= sign * timedelta(hours=hours, minutes=minutes)
    return when.replace(tzinfo=UTC)
