"""One scrape of a Prometheus text exposition, reduced to the families asked for.

``Sampler(names).sample(text, full=...)`` returns a ``Sample``: each gauge or
counter family's value summed over its series (and how many series there were,
when more than one), each histogram's count and sum — and with ``full``, its
cumulative bucket counts.  Summing series is Prometheus's ``sum()``: right for
counts and histograms (several engines, several label sets), and the report
averages the ratio gauges with the series count.

The parsing is ``prometheus_client.parser``'s.  It costs tens of microseconds a
line, and a server's ``/metrics`` can hold thousands of lines (the bundled
server's 241-bucket histograms), so lines are chosen before they are parsed,
with ``str.startswith`` on the families asked for (a scrape that is not ``full``
first drops every bucket line with one regular expression: the line loop over
a thousand buckets held the event loop ~2 ms a scrape, enough to make a trace
replay's sends late): every scrape keeps their
``# TYPE`` lines, gauges, counters and histogram ``_count``/``_sum``; only a
``full`` one keeps histogram buckets; none keeps ``_created``.  The chosen lines
are parsed a chunk at a time, and ``pause()`` runs between chunks (the scraper
passes a zero sleep: under gevent the load generator's users read their
streams between two chunks, not after the whole parse).

A GPU exporter's families are also kept per device: ``Sampler(names, split=labels)``
adds ``per`` (``"g"`` in the file), each gauge or counter by the values of those labels
(``loadtests.gpufamilies.ID_LABELS``: host and GPU index), beside the sum.

A histogram's buckets are kept compactly: the bounds where the cumulative count
rises, each with the bound below it (so every bucket that holds observations is
known by both its ends) — ``Histo.count_at`` reads the count at any bound.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from llmload.loadtests.serverfamilies import family_name

#: a histogram bucket's sample line (a scrape that is not ``full`` keeps none)
_BUCKET_LINE = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*_bucket[{ ][^\n]*\n?", re.MULTILINE)
#: sample lines parsed at a time (the longest the scraper holds the event loop: ~1-3 ms)
CHUNK_LINES = 64


@dataclass
class Histo:
    """A histogram summed over its series: count, sum, and (full scrapes) cumulative buckets."""

    count: float = 0.0
    sum: float = 0.0
    #: bounds (ascending, finite) and the cumulative count at each; empty in a light scrape
    le: list[float] = field(default_factory=list)
    cum: list[float] = field(default_factory=list)

    def count_at(self, bound: float) -> float:
        """Observations at or below ``bound`` (0 below the first kept bound)."""
        if bound == math.inf:
            return self.count
        out = 0.0
        for b, c in zip(self.le, self.cum, strict=True):
            if b > bound:
                break
            out = c
        return out

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.count, "sum": self.sum}
        if self.le:
            out["le"] = self.le
            out["c"] = self.cum
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Histo:
        le = [float(x) for x in d.get("le") or []]
        cum = [float(x) for x in d.get("c") or []]
        if len(le) != len(cum):
            raise ValueError("histogram bounds and counts differ in length")
        return cls(float(d.get("n", 0.0)), float(d.get("sum", 0.0)), le, cum)


@dataclass
class Sample:
    """One scrape's families: values (gauges, counters), series counts, histograms."""

    values: dict[str, float] = field(default_factory=dict)
    series: dict[str, int] = field(default_factory=dict)
    histograms: dict[str, Histo] = field(default_factory=dict)
    full: bool = False
    #: gauges and counters per device (``Sampler(split=...)``): family -> device key -> value
    per: dict[str, dict[str, float]] = field(default_factory=dict)

    def names(self) -> set[str]:
        return set(self.values) | set(self.histograms)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.values:
            out["v"] = self.values
        multi = {k: n for k, n in self.series.items() if n > 1}
        if multi:
            out["s"] = multi
        if self.histograms:
            out["h"] = {k: h.to_json() for k, h in self.histograms.items()}
        if self.per:
            out["g"] = self.per
        return out


def _compact(buckets: dict[float, float]) -> tuple[list[float], list[float]]:
    """Keep the bounds where the cumulative count rises, and the bound before each."""
    bounds = sorted(b for b in buckets if b != math.inf)
    keep: set[int] = set()
    prev = 0.0
    for i, b in enumerate(bounds):
        if buckets[b] != prev:
            keep.add(i)
            if i:
                keep.add(i - 1)
        prev = buckets[b]
    idx = sorted(keep)
    return [bounds[i] for i in idx], [buckets[bounds[i]] for i in idx]


class Sampler:
    """Chooses and parses the lines of the families ``names`` (see the module docstring)."""

    def __init__(self, names: Iterable[str], split: Sequence[str] = ()) -> None:
        #: labels whose values, joined with ``/``, key a series per device (a GPU); none: no split
        self.split = tuple(split)
        given = set(names)
        #: as given, and counters' ``_total`` dropped (the parser names a counter without it)
        self.names = given | {family_name(n) for n in given}
        wanted = sorted(self.names)
        self._samples = tuple(wanted)
        self._types = tuple(f"# TYPE {n}" for n in wanted)
        self._created = tuple(f"{n}_created" for n in wanted) + tuple(
            f"# TYPE {n}_created" for n in wanted
        )
        self._buckets = tuple(f"{n}_bucket" for n in wanted)

    def choose(self, text: str, full: bool) -> list[list[str]]:
        """The lines to parse, as blocks: each starts at a ``# TYPE`` line of a family asked for."""
        if not full:  # most lines are buckets: drop them in one pass in C before the loop
            text = _BUCKET_LINE.sub("", text)
        blocks: list[list[str]] = [[]]
        samples, types, created, buckets = self._samples, self._types, self._created, self._buckets
        for line in text.splitlines():
            if line.startswith("#"):
                if line.startswith(types) and not line.startswith(created):
                    blocks.append([line])
                continue
            if not line.startswith(samples) or line.startswith(created):
                continue
            if not full and line.startswith(buckets):
                continue
            blocks[-1].append(line)
        return [b for b in blocks if b and not (len(b) == 1 and b[0].startswith("#"))]

    def sample(self, text: str, full: bool, pause: Callable[[], None] | None = None) -> Sample:
        """The families asked for in one exposition ``text``."""
        out = Sample(full=full)
        buckets: dict[str, dict[float, float]] = {}
        blocks = self.choose(text, full)
        if pause is not None:
            pause()
        for chunk in self._chunks(blocks):
            for family in text_string_to_metric_families(chunk):
                self._add(out, buckets, family)
            if pause is not None:
                pause()
        for name, by_le in buckets.items():
            h = out.histograms.setdefault(name, Histo())
            h.le, h.cum = _compact(by_le)
        return out

    @staticmethod
    def _chunks(blocks: list[list[str]]) -> Iterator[str]:
        for block in blocks:
            head = [block[0]] if block[0].startswith("#") else []
            lines = block[len(head) :]
            for i in range(0, max(len(lines), 1), CHUNK_LINES):
                yield "\n".join(head + lines[i : i + CHUNK_LINES]) + "\n"

    def _add(self, out: Sample, buckets: dict[str, dict[float, float]], family: Any) -> None:
        name = family.name if family.name in self.names else family_name(family.name)
        if name not in self.names:
            return  # a family whose name only begins like one asked for
        if family.type in ("histogram", "gaugehistogram", "summary"):
            h = out.histograms.setdefault(name, Histo())
            by_le = buckets.setdefault(name, {}) if out.full else None
            for s in family.samples:
                if not math.isfinite(s.value):
                    continue
                if s.name.endswith("_count"):
                    h.count += s.value
                elif s.name.endswith("_sum"):
                    h.sum += s.value
                elif by_le is not None and s.name.endswith("_bucket") and "le" in s.labels:
                    le = float(s.labels["le"])
                    by_le[le] = by_le.get(le, 0.0) + s.value
            return
        wanted = {family.name, f"{family.name}_total", name, f"{name}_total"}
        for s in family.samples:
            if s.name in wanted and math.isfinite(s.value):
                out.values[name] = out.values.get(name, 0.0) + s.value
                out.series[name] = out.series.get(name, 0) + 1
                key = "/".join(s.labels[x] for x in self.split if x in s.labels)
                if key:
                    per = out.per.setdefault(name, {})
                    per[key] = per.get(key, 0.0) + s.value


def read_sample(d: dict[str, Any]) -> Sample:
    """A ``Sample`` from its JSON (``Sample.to_json``); ``ValueError`` when malformed."""
    values = {str(k): float(v) for k, v in (d.get("v") or {}).items()}
    series = {str(k): int(v) for k, v in (d.get("s") or {}).items()}
    hist = {str(k): Histo.from_json(v) for k, v in (d.get("h") or {}).items()}
    per = {str(k): {str(g): float(x) for g, x in v.items()} for k, v in (d.get("g") or {}).items()}
    return Sample(values, series, hist, bool(d.get("full")), per)
