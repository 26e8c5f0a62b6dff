"""``llmload report export``: a run as three joinable tables, Parquet or CSV.

* ``requests`` — one row per record of ``requests.jsonl`` (warm-up included, its
  ``warmup`` flag kept): every ``RequestRecord`` field, its column type read from
  the record's own annotations (a field added to the record is exported without a
  change here); ``itl_s`` and ``tokens_per_event`` as lists (CSV: JSON arrays).
  Key: ``(run_id, request_id)``.
* ``events`` — one row per content event of a request that had a first one:
  ``event`` (0 is the first token), ``t_s`` since the request was handed to the
  client (``ttft_s``, then each ``itl_s`` gap added), ``at`` on the run's wall
  clock (``started_at + t_s``: the clock of ``requests.started_at`` and of the
  scrapes' ``t``), ``tokens`` (``tokens_per_event``, where it has one per event).
  Key: ``(run_id, request_id, event)``; ``request_id`` joins ``requests``.
* ``scrapes`` — the target's own ``/metrics`` as scraped during the run
  (``server_metrics.jsonl``) in long form: ``t``, ``source`` (``server``),
  ``family``, ``kind`` (``value``: a gauge or counter, summed over its label sets,
  ``series`` of them; ``count``/``sum``: a histogram's; ``bucket``: a cumulative
  bucket, ``le`` its bound, in full scrapes), ``value``.  Label sets are not kept:
  the scraper sums a family over them when it samples.  Key: ``(run_id, t, source,
  family, kind, le)``.

Rows are written in batches (``BATCH`` records), so a million-request run needs
the memory of one batch, not of the run.  Output is deterministic: exporting the
same run twice writes the same files.  ``schema.json`` beside the tables lists
every column with its type and unit.  Parquet needs ``pyarrow`` (``pip install
'llmload[parquet]'``); CSV needs nothing.
"""

from __future__ import annotations

import csv
import json
import typing
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from llmload.loadtests import recordfile
from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.table.loader import decode_line
from llmload.reports.table.scrapes import read_server_run

FORMATS = ("parquet", "csv")
#: records decoded and written at a time
BATCH = 4_096


class ExportError(Exception):
    """The run cannot be exported as asked (a sentence for the user; exit 2)."""


@dataclass(frozen=True)
class Column:
    """One column: its name, its type (``string``, ``int64``, ``float64``, ``bool``,
    ``list<float64>``, ``list<int64>``) and its unit."""

    name: str
    type: str
    unit: str = ""


def _unit(name: str) -> str:
    if name in ("started_at", "at", "t"):
        return "s since the Unix epoch"
    if name.endswith("_s") or name == "t_s":
        return "s"
    if name.endswith("tokens") or name == "tokens":
        return "tokens"
    return ""


def _type_of(hint: Any) -> str:
    args = set(typing.get_args(hint)) or {hint}
    if typing.get_origin(hint) is list:
        (inner,) = typing.get_args(hint)
        return f"list<{_type_of(inner)}>"
    if hint is bool:
        return "bool"
    if float in args:
        return "float64"
    if int in args:
        return "int64"
    return "string"  # str, a Literal of strings, either or None


def request_columns() -> list[Column]:
    """``requests``' columns: the run's id, then every record field, from its declaration."""
    hints = typing.get_type_hints(RequestRecord)
    out = [Column("run_id", "string")]
    out += [Column(f.name, _type_of(hints[f.name]), _unit(f.name)) for f in fields(RequestRecord)]
    return out


EVENT_COLUMNS = [
    Column("run_id", "string"),
    Column("request_id", "string"),
    Column("event", "int64"),
    Column("t_s", "float64", "s"),
    Column("at", "float64", _unit("at")),
    Column("tokens", "int64", "tokens"),
]
SCRAPE_COLUMNS = [
    Column("run_id", "string"),
    Column("t", "float64", _unit("t")),
    Column("source", "string"),
    Column("family", "string"),
    Column("kind", "string"),
    Column("le", "float64"),
    Column("series", "int64"),
    Column("value", "float64"),
]
KEYS = {
    "requests": ["run_id", "request_id"],
    "events": ["run_id", "request_id", "event"],
    "scrapes": ["run_id", "t", "source", "family", "kind", "le"],
}


def schema() -> dict[str, Any]:
    """``schema.json``: every table's columns (name, type, unit) and key."""
    tables = {"requests": request_columns(), "events": EVENT_COLUMNS, "scrapes": SCRAPE_COLUMNS}
    return {
        "kind": "llmload-export",
        "schema": 1,
        "tables": {
            name: {
                "key": KEYS[name],
                "columns": [
                    {"name": c.name, "type": c.type, **({"unit": c.unit} if c.unit else {})}
                    for c in cols
                ],
            }
            for name, cols in tables.items()
        },
    }


@dataclass
class Counts:
    """What an export wrote, and what it could not read."""

    requests: int = 0
    events: int = 0
    scrapes: int = 0
    corrupt_lines: int = 0
    files: list[Path] = field(default_factory=list)


# -- rows -------------------------------------------------------------------------------------


def _records(run_dir: Path, counts: Counts) -> Iterator[dict[str, Any]]:
    """The records file's objects in order; a corrupt line is skipped and counted."""
    path = recordfile.find(run_dir)
    if path is None:
        raise ExportError(f"{run_dir} has no requests.jsonl (not a run directory?)")
    for line in recordfile.read_lines(path):
        if not line.strip():
            continue
        try:
            data = decode_line(line)
            if not isinstance(data, dict) or "request_id" not in data:
                raise ValueError("not a record")
        except (ValueError, TypeError, OverflowError):
            counts.corrupt_lines += 1
            continue
        yield data


def _events(run_id: str, rec: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    ttft = rec.get("ttft_s")
    if not isinstance(ttft, int | float):
        return
    gaps = rec.get("itl_s") or []
    tpe = rec.get("tokens_per_event") or []
    aligned = len(tpe) == len(gaps) + 1
    start = float(rec.get("started_at") or 0.0)
    t = float(ttft)
    for k in range(len(gaps) + 1):
        if k:
            t += float(gaps[k - 1])
        yield (run_id, rec["request_id"], k, t, start + t, tpe[k] if aligned else None)


def _scrapes(run_dir: Path, run_id: str) -> Iterator[tuple[Any, ...]]:
    server = read_server_run(run_dir)
    if server is None:
        return
    for scrape in server.scrapes:
        s, t = scrape.sample, scrape.t
        for family in sorted(s.values):
            yield (
                run_id,
                t,
                "server",
                family,
                "value",
                None,
                s.series.get(family, 1),
                s.values[family],
            )
        for family in sorted(s.histograms):
            h = s.histograms[family]
            yield (run_id, t, "server", family, "count", None, None, h.count)
            yield (run_id, t, "server", family, "sum", None, None, h.sum)
            for le, c in zip(h.le, h.cum, strict=True):
                yield (run_id, t, "server", family, "bucket", le, None, c)


# -- writers ----------------------------------------------------------------------------------


class _Csv:
    """Rows as text: ``""`` for None, a float's shortest repr (the JSON's own value), lists
    as JSON arrays; one Python row at a time (for runs a spreadsheet opens)."""

    def __init__(self, path: Path, columns: list[Column]) -> None:
        self.path = path
        self.columns = columns
        self._fh = path.open("w", newline="", encoding="utf-8")
        self._w = csv.writer(self._fh, lineterminator="\n")
        self._w.writerow([c.name for c in columns])
        self._lists = [i for i, c in enumerate(columns) if c.type.startswith("list")]

    def records(self, batch: list[dict[str, Any]]) -> None:
        self.write([tuple(_normal(rec.get(c.name), c) for c in self.columns) for rec in batch])

    def events(self, batch: list[dict[str, Any]], lists: Any = None) -> int:
        rows = [row for rec in batch for row in _events(rec["run_id"], rec)]
        self.write(rows)
        return len(rows)

    def write(self, rows: list[tuple[Any, ...]]) -> None:
        for row in rows:
            if self._lists:
                row = tuple(
                    json.dumps(v, separators=(",", ":")) if i in self._lists else v
                    for i, v in enumerate(row)
                )
            self._w.writerow("" if v is None else repr(v) if type(v) is float else v for v in row)

    def close(self) -> None:
        self._fh.close()


class _Parquet:
    """Columns per batch, converted by pyarrow (and events by numpy), not row by row; each
    batch compressed and written on a thread of its own while the next one is read (one
    batch in flight: the memory of two)."""

    def __init__(self, path: Path, columns: list[Column]) -> None:
        pa, pq = _arrow()
        self.path = path
        self.columns = columns
        self._pa = pa
        self.schema = pa.schema([(c.name, _arrow_type(pa, c.type)) for c in columns])
        self._w = pq.ParquetWriter(path, self.schema, compression="zstd", compression_level=1)
        self._lists = [c.name for c in columns if c.type.startswith("list")]
        self._flat = pa.schema([f for f in self.schema if f.name not in self._lists])
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._pending: Future[None] | None = None

    def _put(self, table: Any) -> None:
        if self._pending is not None:
            self._pending.result()
        self._pending = self._pool.submit(self._w.write_table, table)

    def records(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        """Write the batch's rows; its list columns, converted once, for ``events``."""
        pa = self._pa
        lists = {
            name: pa.array([r.get(name) or [] for r in batch], type=self.schema.field(name).type)
            for name in self._lists
        }
        try:
            flat = pa.Table.from_pylist(batch, schema=self._flat)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # a value of another JSON type somewhere
            names = set(self._flat.names)
            rows = [
                {c.name: _normal(r.get(c.name), c) for c in self.columns if c.name in names}
                for r in batch
            ]
            flat = pa.Table.from_pylist(rows, schema=self._flat)
        arrays = [lists[f.name] if f.name in lists else flat[f.name] for f in self.schema]
        self._put(pa.Table.from_arrays(arrays, schema=self.schema))
        return lists

    def events(self, batch: list[dict[str, Any]], lists: dict[str, Any] | None = None) -> int:
        """Each timed request's content events: ``t_s`` is the running sum of its TTFT and
        gaps (one cumulative sum over the batch, each request's start taken off: within
        a nanosecond of the request's own sum)."""
        pa = self._pa
        keep = [i for i, r in enumerate(batch) if isinstance(r.get("ttft_s"), int | float)]
        if not keep:
            return 0
        timed = [batch[i] for i in keep]
        rows = pa.array(keep, type=pa.int64())
        if lists is None:
            lists = {
                name: pa.array([r.get(name) or [] for r in batch], type=pa.list_(kind))
                for name, kind in (("itl_s", pa.float64()), ("tokens_per_event", pa.int64()))
            }
        itl, tpe = lists["itl_s"].take(rows), lists["tokens_per_event"].take(rows)
        ttft = np.array([r["ttft_s"] for r in timed], dtype=np.float64)
        lens = np.diff(itl.offsets.to_numpy()) + 1
        total = int(lens.sum())
        starts = np.cumsum(lens) - lens
        steps = np.empty(total)
        steps[starts] = ttft
        rest = np.ones(total, dtype=bool)
        rest[starts] = False
        steps[rest] = itl.flatten().to_numpy(zero_copy_only=False)
        running = np.cumsum(steps)
        t = running - np.repeat(running[starts] - ttft, lens)
        owner = np.repeat(np.arange(len(timed)), lens)
        event = np.arange(total, dtype=np.int64) - np.repeat(starts, lens)
        started = np.array([float(r.get("started_at") or 0.0) for r in timed])
        ids = pa.array([r["request_id"] for r in timed], type=pa.string()).take(owner)
        # tokens: where a request has one count per content event
        tpe_lens = np.diff(tpe.offsets.to_numpy())
        aligned = tpe_lens == lens
        counts = tpe.flatten().to_numpy(zero_copy_only=False)
        on = aligned[owner]
        tokens = np.zeros(total, dtype=np.int64)
        tokens[on] = counts[aligned[np.repeat(np.arange(len(timed)), tpe_lens)]]
        run = pa.array([timed[0]["run_id"]], type=pa.string()).take(np.zeros(total, np.int64))
        arrays = [
            run,
            ids,
            pa.array(event),
            pa.array(t),
            pa.array(started[owner] + t),
            pa.array(tokens, mask=~on),
        ]
        self._put(pa.Table.from_arrays(arrays, schema=self.schema))
        return total

    def write(self, rows: list[tuple[Any, ...]]) -> None:
        if rows:
            cols = list(zip(*rows, strict=True))
            arrays = [self._pa.array(cols[i], type=f.type) for i, f in enumerate(self.schema)]
            self._put(self._pa.Table.from_arrays(arrays, schema=self.schema))

    def close(self) -> None:
        try:
            if self._pending is not None:
                self._pending.result()
        finally:
            self._pool.shutdown()
            self._w.close()


def _arrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError(
            "--format parquet needs pyarrow: pip install 'llmload[parquet]' (or --format csv)"
        ) from None
    return pa, pq


def _arrow_type(pa: Any, name: str) -> Any:
    if name.startswith("list<"):
        return pa.list_(_arrow_type(pa, name[5:-1]))
    return {
        "string": pa.string(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
    }[name]


def _writer(fmt: str, path: Path, columns: list[Column]) -> _Csv | _Parquet:
    return _Parquet(path, columns) if fmt == "parquet" else _Csv(path, columns)


def _normal(value: Any, col: Column) -> Any:
    """A JSON value as its column holds it (an int field written as 3.0 is 3; a number
    where a string belongs, its text)."""
    if value is None:
        return None
    kind = col.type
    if kind == "int64":
        return int(value)
    if kind == "float64":
        return float(value)
    if kind == "bool":
        return bool(value)
    if kind == "string":
        return value if isinstance(value, str) else json.dumps(value)
    return list(value)


def export_run(run_dir: Path | str, fmt: str, out: Path | str | None = None) -> Counts:
    """Write ``requests``, ``events``, ``scrapes`` (when the run scraped) and ``schema.json``
    into ``out`` (default ``RUN/export/``); what was written."""
    run_dir = Path(run_dir)
    if fmt not in FORMATS:
        raise ExportError(f"--format {fmt}: choose from {', '.join(FORMATS)}")
    if not run_dir.is_dir():
        raise ExportError(f"run directory {run_dir} does not exist")
    if fmt == "parquet":
        _arrow()  # the extra's absence is one sentence, before any file is written
    run_id = _run_id(run_dir)
    folder = Path(out) if out is not None else run_dir / "export"
    folder.mkdir(parents=True, exist_ok=True)
    counts = Counts()
    req = _writer(fmt, folder / f"requests.{fmt}", request_columns())
    ev = _writer(fmt, folder / f"events.{fmt}", EVENT_COLUMNS)
    batch: list[dict[str, Any]] = []
    try:
        for rec in _records(run_dir, counts):
            rec["run_id"] = run_id
            batch.append(rec)
            if len(batch) >= BATCH:
                counts.events += ev.events(batch, req.records(batch))
                counts.requests += len(batch)
                batch = []
        if batch:
            counts.events += ev.events(batch, req.records(batch))
            counts.requests += len(batch)
    finally:
        req.close()
        ev.close()
    if not counts.requests:
        raise ExportError(f"{run_dir} holds no readable records: nothing to export")
    counts.files += [req.path, ev.path]
    scrapes = list(_scrapes(run_dir, run_id))
    target = folder / f"scrapes.{fmt}"
    if scrapes:
        sw = _writer(fmt, target, SCRAPE_COLUMNS)
        try:
            sw.write(scrapes)
        finally:
            sw.close()
        counts.scrapes = len(scrapes)
        counts.files.append(target)
    elif target.exists():
        target.unlink()  # an earlier export's, of scrapes this run no longer has
    doc = schema()
    doc["run_id"] = run_id
    doc["format"] = fmt
    (folder / "schema.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    counts.files.append(folder / "schema.json")
    return counts


def _run_id(run_dir: Path) -> str:
    try:
        meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    return str(meta.get("run_id") or run_dir.name) if isinstance(meta, dict) else run_dir.name


__all__ = ["ExportError", "export_run", "schema"]
