"""A run's records as columns: numpy arrays instead of a million record objects.

An hour of requests is a million records and tens of millions of token gaps.
As ``RequestRecord`` objects with lists of Python floats that was 5 GiB and
minutes for ``llmload report build``; here each numeric field is one float64
column (``None`` is NaN), each label (phase, scenario, status, ...) a small
integer code into its distinct values, and every record's ``itl_s`` one slice
of a single flat float64 array (``tokens_per_event`` likewise, stored compactly:
the usual "one token per event" as a length).  Values are the JSON's own
float64s, so statistics over them are exact — the same percentiles, means and
counts as over the record objects.

``RecordTable`` is also a ``Sequence[RequestRecord]``: iterating (or indexing)
it builds each record on the fly, so code that reads records one by one still
works on a table; the report's statistics read the columns.  ``where(mask)``
selects records without copying the columns (a table is a shared store plus
the row numbers it holds); ``TableBuilder`` fills a store one decoded JSON
object at a time (``reports.table.loader`` streams ``requests.jsonl`` into it), and
``RecordTable.of(records)`` makes one from record objects.
"""

from __future__ import annotations

import math
import typing
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import MISSING, fields
from operator import itemgetter
from typing import Any, overload

import numpy as np

from llmload.loadtests.measure.record import RequestRecord

_Names = tuple[str, ...]


def _schema() -> tuple[_Names, frozenset[str], _Names, _Names, _Names]:
    """``RequestRecord``'s fields by how a table keeps them, read from its annotations (a
    field added to the record is kept without a change here): numbers, of them the ints,
    labels, per-record texts (high cardinality: ids, errors) and flags."""
    hints = typing.get_type_hints(RequestRecord)
    numbers, ints, labels, flags = ["started_at"], set(), [], []
    for f in fields(RequestRecord):
        name, hint = f.name, hints[f.name]
        args = set(typing.get_args(hint)) or {hint}
        if name in _LISTS or name in TEXTS or name == "started_at":
            continue
        if hint is bool:
            flags.append(name)
        elif args & {int, float}:
            numbers.append(name)
            if float not in args:
                ints.add(name)
        else:  # str, a Literal of strings, either or None
            labels.append(name)
    return tuple(numbers), frozenset(ints), tuple(labels), TEXTS, tuple(flags)


_LISTS = ("itl_s", "tokens_per_event")
#: per-record texts (not labels: nearly every value differs)
TEXTS = ("request_id", "error", "session_id")
#: numeric fields, each a float64 column (NaN for None; ``started_at`` first); ``INTS``
#: come back as ints; labels: a code per record into the field's distinct values (None
#: included); flags: a byte per record
NUMBERS, INTS, LABELS, _TEXTS, FLAGS = _schema()
_DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in fields(RequestRecord) if f.default is not MISSING
}
_REQUIRED = tuple(
    f.name for f in fields(RequestRecord) if f.default is MISSING and f.default_factory is MISSING
)
#: what ``TableBuilder.add`` reads of a record, in this order
_ALL_KEYS = (*NUMBERS, *LABELS, *_LISTS, *TEXTS, *FLAGS)
_ALL = itemgetter(*_ALL_KEYS)
_COL = {name: i for i, name in enumerate(NUMBERS)}
_WIDTH = len(NUMBERS)
_NAN = math.nan
_NUMBER_TYPES = frozenset((int, float))
_STR = {str}
_SCALAR_TYPES = frozenset((int, float, type(None)))
#: ``tokens_per_event`` kinds: none, all ones (its length kept), one value, any values
_TPE_EMPTY, _TPE_ONES, _TPE_ONE, _TPE_LIST = 0, 1, 2, 3
#: the four labels every record must have as strings (``reports.table.loader`` refused others)
_STRINGS = tuple(LABELS.index(k) for k in ("phase", "scenario", "mode", "status"))


class _Store:
    """The columns of every record of a run (append-only while building)."""

    def __init__(self) -> None:
        self.numbers = array("d")  # row-major, _WIDTH per record
        self.codes: dict[str, array[int]] = {name: array("i") for name in LABELS}
        self.values: dict[str, list[Any]] = {name: [] for name in LABELS}
        self.index: dict[str, dict[Any, int]] = {name: {} for name in LABELS}
        self.request_ids: list[Any] = []
        #: the other texts, row -> value (most are None)
        self.texts: dict[str, dict[int, Any]] = {name: {} for name in TEXTS[1:]}
        self.flags: dict[str, array[int]] = {name: array("b") for name in FLAGS}
        self.itl = array("d")
        self.itl_ends = array("q")  # itl_ends[i]: end of record i's gaps in ``itl``
        self.tpe_kind = array("b")
        self.tpe_value = array("d")  # ones: the length; one value: the value
        self.tpe_lists: dict[int, list[Any]] = {}
        self.n = 0
        self._frozen: dict[str, Any] | None = None

    def frozen(self) -> dict[str, Any]:
        """numpy views of the columns (no copies), made once the store is complete."""
        if self._frozen is None:
            num = np.frombuffer(self.numbers, dtype=np.float64).reshape(-1, _WIDTH)
            ends = np.frombuffer(self.itl_ends, dtype=np.int64)
            self._frozen = {
                "numbers": num,
                "codes": {k: np.frombuffer(v, dtype=np.int32) for k, v in self.codes.items()},
                "flags": {
                    k: np.frombuffer(v, dtype=np.int8).astype(bool) for k, v in self.flags.items()
                },
                "itl": np.frombuffer(self.itl, dtype=np.float64),
                "itl_ends": ends,
                "itl_starts": np.concatenate(([0], ends[:-1])) if len(ends) else ends,
                "tpe_kind": np.frombuffer(self.tpe_kind, dtype=np.int8),
                "tpe_value": np.frombuffer(self.tpe_value, dtype=np.float64),
            }
        return self._frozen


class TableBuilder:
    """Fills a table from decoded JSON objects (``add``), refusing a malformed one whole."""

    def __init__(self) -> None:
        self.store = s = _Store()
        self._indexes = tuple(s.index[name] for name in LABELS)
        self._codes = tuple(s.codes[name] for name in LABELS)

    def add(self, data: dict[str, Any]) -> None:
        """One record's JSON object; ``ValueError``/``TypeError`` if it is not a record.

        Refused as ``RequestRecord.from_dict`` and the loader's type checks refused
        them: a missing field, a number that is not one, a phase, scenario, mode or
        status that is not a string, a gap or token list that is not numbers (a
        ``true`` in one reads as 1), a label that is a list or an object.  Nothing is
        appended unless all of the record is good.  The hot path of loading a run:
        the checks are done by C (``set(map(type, ...))``, ``array``), not per value.
        """
        try:  # a record as the run writer writes it: every field, one C call
            values = _ALL(data)
        except KeyError:  # fields left out: their defaults (the required ones: refused)
            for key in _REQUIRED:
                if key not in data:
                    raise TypeError(f"missing field {key!r}") from None
            values = tuple(data.get(k, _DEFAULTS.get(k)) for k in _ALL_KEYS)
        nums = values[:_WIDTH]
        if type(nums[0]) not in _NUMBER_TYPES or not set(map(type, nums)) <= _SCALAR_TYPES:
            raise ValueError("a numeric field is not a number")
        labels = values[_WIDTH : _WIDTH + len(LABELS)]
        if {type(labels[i]) for i in _STRINGS} != _STR:
            raise ValueError("phase, scenario, mode and status must be strings")
        codes: list[int | None] = [
            index.get(v) for index, v in zip(self._indexes, labels, strict=True)
        ]
        rest = _WIDTH + len(LABELS)
        itl, tpe = values[rest : rest + 2]
        texts = values[rest + 2 : rest + 2 + len(TEXTS)]
        flags = values[rest + 2 + len(TEXTS) :]
        if (itl is not None and type(itl) is not list) or (
            tpe is not None and type(tpe) is not list
        ):
            raise ValueError("itl_s and tokens_per_event must be lists of numbers")
        gaps = array("d", itl or ())  # TypeError for anything but numbers
        tpe = tpe or []
        n = len(tpe)
        if n == 0:
            kind, value = _TPE_EMPTY, 0.0
        elif tpe.count(1) == n:
            kind, value = _TPE_ONES, float(n)
        elif n == 1 and type(tpe[0]) is int:
            kind, value = _TPE_ONE, float(tpe[0])
        else:
            array("d", tpe)  # numbers, or TypeError
            kind, value = _TPE_LIST, 0.0
        s = self.store
        # all checked: append (nothing above changed the store)
        if None in codes:  # a label value not seen before
            for i, (name, v) in enumerate(zip(LABELS, labels, strict=True)):
                if codes[i] is None:
                    new = len(s.values[name])
                    codes[i] = s.index[name][v] = new
                    s.values[name].append(v)
        for column, code in zip(self._codes, codes, strict=True):
            column.append(code)  # type: ignore[arg-type]  # every None was replaced just above
        s.numbers.extend([_NAN if v is None else v for v in nums])
        s.request_ids.append(texts[0])
        for name, text in zip(TEXTS[1:], texts[1:], strict=True):
            if text is not None:
                s.texts[name][s.n] = text
        for column, flag in zip(s.flags.values(), flags, strict=True):
            column.append(1 if flag else 0)
        s.itl.extend(gaps)
        s.itl_ends.append(len(s.itl))
        s.tpe_kind.append(kind)
        s.tpe_value.append(value)
        if kind == _TPE_LIST:
            s.tpe_lists[s.n] = tpe
        s.n += 1

    def add_record(self, record: RequestRecord) -> None:
        self.add(record.to_dict())

    def table(self) -> RecordTable:
        return RecordTable(self.store)


class RecordTable(Sequence[RequestRecord]):
    """Some of a run's records (all of them, or a selection), as columns."""

    def __init__(self, store: _Store, rows: np.ndarray | None = None) -> None:
        self._s = store
        self._f = store.frozen()
        self.rows = np.arange(store.n, dtype=np.int64) if rows is None else rows

    @classmethod
    def of(cls, records: Iterable[RequestRecord]) -> RecordTable:
        """A table of record objects (already a table: itself)."""
        if isinstance(records, RecordTable):
            return records
        builder = TableBuilder()
        for r in records:
            builder.add_record(r)
        return builder.table()

    # -- Sequence -----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> RequestRecord: ...

    @overload
    def __getitem__(self, i: slice) -> RecordTable: ...

    def __getitem__(self, i: int | slice) -> RequestRecord | RecordTable:
        if isinstance(i, slice):
            return RecordTable(self._s, self.rows[i])
        return self._record(int(self.rows[i]))

    def __iter__(self) -> Iterator[RequestRecord]:
        for row in self.rows.tolist():
            yield self._record(row)

    def _record(self, row: int) -> RequestRecord:
        s, f = self._s, self._f
        kw: dict[str, Any] = {}
        for name, v in zip(NUMBERS, f["numbers"][row].tolist(), strict=True):
            kw[name] = None if v != v else int(v) if name in INTS else v  # NaN: None
        for name in LABELS:
            kw[name] = s.values[name][s.codes[name][row]]
        kw["request_id"] = s.request_ids[row]
        for name, texts in s.texts.items():
            kw[name] = texts.get(row)
        for name, column in s.flags.items():
            kw[name] = bool(column[row])
        start = s.itl_ends[row - 1] if row else 0
        kw["itl_s"] = s.itl[start : s.itl_ends[row]].tolist()
        kw["tokens_per_event"] = self._tpe(row)
        return RequestRecord(**kw)

    def _tpe(self, row: int) -> list[Any]:
        """The ``tokens_per_event`` of the store's record ``row``, as the record holds it."""
        s = self._s
        kind, value = s.tpe_kind[row], s.tpe_value[row]
        if kind == _TPE_ONES:
            return [1] * int(value)
        if kind == _TPE_ONE:
            return [int(value)]
        if kind == _TPE_LIST:
            return list(s.tpe_lists[row])
        return []

    # -- selections ---------------------------------------------------------------------

    def where(self, mask: np.ndarray) -> RecordTable:
        """The records of this table where ``mask`` (one bool per record) is true."""
        return RecordTable(self._s, self.rows[mask])

    def num(self, name: str) -> np.ndarray:
        """A numeric field of these records (float64; NaN where None)."""
        return self._f["numbers"][self.rows, _COL[name]]

    def codes(self, name: str) -> np.ndarray:
        """A label field of these records as codes into ``label_values(name)``."""
        return self._f["codes"][name][self.rows]

    def label_values(self, name: str) -> list[Any]:
        """Every distinct value of a label field in the whole store (by code)."""
        return self._s.values[name]

    def is_(self, name: str, value: Any) -> np.ndarray:
        """Mask: these records whose label ``name`` equals ``value``."""
        code = self._s.index[name].get(value)
        if code is None:
            return np.zeros(len(self.rows), dtype=bool)
        return self.codes(name) == code

    def is_any(self, name: str, values: Iterable[Any]) -> np.ndarray:
        """Mask: these records whose label ``name`` is one of ``values``."""
        index = self._s.index[name]
        return np.isin(self.codes(name), [index[v] for v in set(values) if v in index])

    def distinct(self, name: str) -> list[Any]:
        """The values of a label among these records, in order of first appearance."""
        codes = self.codes(name)
        if not len(codes):
            return []
        uniq, first = np.unique(codes, return_index=True)
        values = self._s.values[name]
        return [values[c] for c in uniq[np.argsort(first)].tolist()]

    def ok(self) -> np.ndarray:
        return self.is_("status", "ok")

    def has(self, name: str) -> np.ndarray:
        """Mask: these records whose text field ``name`` (``error``, ``session_id``) is set."""
        rows = self._s.texts[name]
        if not rows:
            return np.zeros(len(self.rows), dtype=bool)
        return np.isin(self.rows, np.fromiter(rows, dtype=np.int64, count=len(rows)))

    def text(self, name: str) -> list[Any]:
        """A text field (``request_id``, ``error``, ``session_id``) of these records, None where
        a record has none."""
        if name == "request_id":
            ids = self._s.request_ids
            return [ids[row] for row in self.rows.tolist()]
        texts = self._s.texts[name]
        return [texts.get(row) for row in self.rows.tolist()]

    def flag(self, name: str) -> np.ndarray:
        """A boolean field of these records (``warmup``, ``no_output``, ...)."""
        return self._f["flags"][name][self.rows]

    def warmup_field(self) -> np.ndarray:
        """The records' own ``warmup`` field (``warmup()`` also counts the warm-up phase)."""
        return self.flag("warmup")

    def warmup(self) -> np.ndarray:
        """Warm-up records: ``warmup`` set, or in the phase named ``warmup``."""
        return self.flag("warmup") | self.is_("phase", "warmup")

    # -- token gaps -----------------------------------------------------------------------

    def itl_counts(self) -> np.ndarray:
        """How many gaps each of these records has."""
        f = self._f
        return f["itl_ends"][self.rows] - f["itl_starts"][self.rows]

    def gaps_below(self, threshold: float) -> np.ndarray:
        """How many of each record's gaps are under ``threshold`` (computed once per store)."""
        cache = self._s.__dict__.setdefault("_below", {})
        if threshold not in cache:
            f = self._f
            flat, starts, ends = f["itl"], f["itl_starts"], f["itl_ends"]
            below = np.zeros(self._s.n, dtype=np.int64)
            has = ends > starts
            if has.any():
                sums = np.add.reduceat(flat < threshold, starts[has], dtype=np.int64)
                below[has] = sums
            cache[threshold] = below
        return cache[threshold][self.rows]

    def gaps_of(self, i: int) -> np.ndarray:
        """The gaps of this table's ``i``-th record (a view)."""
        f, row = self._f, int(self.rows[i])
        return f["itl"][int(f["itl_starts"][row]) : int(f["itl_ends"][row])]

    def gap_span(self) -> tuple[np.ndarray, int]:
        """The store's flat gaps from this table's first record to its last (a view; it
        may hold other records' gaps between them), and where it starts in the store."""
        f = self._f
        if not len(self.rows):
            return f["itl"][:0], 0
        start = int(f["itl_starts"][int(self.rows[0])])
        return f["itl"][start : int(f["itl_ends"][int(self.rows[-1])])], start

    def gap_positions(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For flat gap positions: (their record's store row, their index within it)."""
        f = self._f
        rows = np.searchsorted(f["itl_ends"], positions, side="right")
        return rows, positions - f["itl_starts"][rows]

    def gaps_mask(self, mask: np.ndarray | None = None) -> np.ndarray:
        """A mask over the flat gaps: those of these records (where ``mask``)."""
        f = self._f
        keep = np.zeros(self._s.n, dtype=bool)
        keep[self.rows if mask is None else self.rows[mask]] = True
        lengths = f["itl_ends"] - f["itl_starts"]
        return np.repeat(keep, lengths)

    def itl(self, mask: np.ndarray | None = None, copy: bool = False) -> np.ndarray:
        """Every gap of these records (where ``mask``), record by record.

        A view of the store's own array when the records are consecutive (do not
        modify it), unless ``copy``: then always an array of its own."""
        f = self._f
        flat = f["itl"]
        rows = self.rows if mask is None else self.rows[mask]
        if not len(rows):
            return flat[:0].copy()
        first, last = int(rows[0]), int(rows[-1])
        if last - first + 1 == len(rows):  # consecutive records: one slice of the flat array
            view = flat[int(f["itl_starts"][first]) : int(f["itl_ends"][last])]
            return view.copy() if copy else view
        if len(rows) * 8 < self._s.n:  # a few records: gather their slices
            starts, counts = f["itl_starts"][rows], (f["itl_ends"] - f["itl_starts"])[rows]
            before = np.cumsum(counts) - counts
            index = np.repeat(starts - before, counts) + np.arange(int(counts.sum()))
            return flat[index]
        return flat[self.gaps_mask(mask)]

    def arrivals(self, first: np.ndarray) -> np.ndarray:
        """Each record's content-event times: ``first[i]``, then each of its gaps added in turn
        — the same float additions, in the same order, as a running sum over its ``itl_s`` —
        record after record in one flat array (``itl_counts() + 1`` times per record).

        One pass per gap index over the records that have that many (a record's k-th gap
        is added to every such record's running time at once)."""
        f = self._f
        counts = self.itl_counts()
        sizes = counts + 1
        offsets = np.cumsum(sizes) - sizes
        out = np.empty(int(sizes.sum()), dtype=np.float64)
        now = np.array(first, dtype=np.float64)
        out[offsets] = now
        flat, starts = f["itl"], f["itl_starts"][self.rows]
        order = np.argsort(-counts, kind="stable")
        longest_first = -counts[order]
        for k in range(1, int(counts.max(initial=0)) + 1):
            have = order[: int(np.searchsorted(longest_first, -k, side="right"))]
            now[have] += flat[starts[have] + (k - 1)]
            out[offsets[have] + k] = now[have]
        return out

    def tpe_lengths(self) -> np.ndarray:
        """How many entries each of these records' ``tokens_per_event`` has."""
        f = self._f
        kind, value = f["tpe_kind"][self.rows], f["tpe_value"][self.rows]
        out = np.where(kind == _TPE_ONES, value, np.where(kind == _TPE_ONE, 1.0, 0.0))
        for i in np.flatnonzero(kind == _TPE_LIST).tolist():
            out[i] = len(self._s.tpe_lists[int(self.rows[i])])
        return out.astype(np.int64)

    def tpe_ones(self) -> np.ndarray:
        """Mask: these records whose ``tokens_per_event`` entries are all 1 (none counts)."""
        kind = self._f["tpe_kind"][self.rows]
        return (kind == _TPE_ONES) | (kind == _TPE_EMPTY)

    def tokens_per_event(self, i: int) -> list[Any]:
        """The ``tokens_per_event`` of this table's ``i``-th record."""
        return self._tpe(int(self.rows[i]))

    def per_token_is_itl(self, mask: np.ndarray | None = None) -> bool:
        """Are ``per_token_gaps(mask)`` the gaps themselves (one token per event, always)?"""
        f = self._f
        rows = self.rows if mask is None else self.rows[mask]
        counts = (f["itl_ends"] - f["itl_starts"])[rows]
        with_gaps = counts > 0
        kind, value = f["tpe_kind"][rows][with_gaps], f["tpe_value"][rows][with_gaps]
        return bool(((kind == _TPE_ONES) & (value == counts[with_gaps] + 1)).all())

    def per_token_gaps(self, mask: np.ndarray | None = None) -> np.ndarray:
        """``reports.table.timeseries.per_token_gaps`` of every one of these records (``mask``).

        Each gap divided by the tokens of the event that ends it, for records whose
        ``tokens_per_event`` has one entry more than their gaps; zero-token events
        are left out.  One token per event (the usual stream): the gaps themselves.
        """
        f = self._f
        sel = np.ones(len(self.rows), dtype=bool) if mask is None else mask
        rows = self.rows[sel]
        counts = (f["itl_ends"] - f["itl_starts"])[rows]
        kind, value = f["tpe_kind"][rows], f["tpe_value"][rows]
        ones = (kind == _TPE_ONES) & (value == counts + 1)
        # (one value or none: no gap has an event of its own to divide by)
        lists = kind == _TPE_LIST
        if not lists.any():
            sub = sel.copy()
            sub[sel] = ones
            return self.itl(sub, copy=True)
        parts: list[np.ndarray] = []
        idx = np.nonzero(sel)[0]
        sub = np.zeros(len(self.rows), dtype=bool)
        sub[idx[ones]] = True
        parts.append(self.itl(sub))
        for row in rows[lists].tolist():
            tpe = self._s.tpe_lists[row]
            start = int(f["itl_starts"][row])
            gaps = f["itl"][start : int(f["itl_ends"][row])]
            if len(tpe) != len(gaps) + 1:
                continue
            n = np.asarray(tpe[1:], dtype=np.float64)
            parts.append(gaps[n > 0] / n[n > 0])
        return np.concatenate(parts) if len(parts) > 1 else parts[0]
