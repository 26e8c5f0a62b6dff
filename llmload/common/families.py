"""Lock-free labelled metric families for hot paths, exposed as Collectors (client and server).

The load generator's exporter and the bundled server both count with these
(the exporter imports this module; the server imports no harness code).
prometheus_client's metrics take a lock for every bucket increment, sum
update, ``inc`` and ``labels`` lookup; under gevent (locust) those are gevent
locks, dozens per stream record (the cost per request, before and after:
``docs/exporter.md``, "The per-request path is cheap").
Here an observation is a ``bisect`` and two additions, a counter step one
addition.  That is safe because every update comes from one thread — the load
generator's event loop, where the record hub calls its sinks, or the server's
asyncio loop — and a scrape reads a copy of the counts (one C-level list copy
under the GIL), so each scrape's buckets and count agree; a sum may lag by the
one observation in progress, as with prometheus_client's own histograms.
Rarely-updated metrics (users, harness health, gauges read at scrape time)
stay plain prometheus_client collectors.

``render()`` writes a family's text exposition directly, with each series'
name and labels formatted once and kept: the shared latency grid
(``llmload.common.buckets``) is ~240 buckets per label set, and
prometheus_client's generic formatting of that many samples cost tens of
milliseconds per scrape on the event loop.  ``collect()`` (what
``get_sample_value`` and the Pushgateway read) stays.  These families never
emit ``*_created`` series.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def series_name(name: str, labels: Iterable[tuple[str, str]]) -> str:
    """``name{a="x",b="y"}`` (labels sorted, values escaped) as the text format writes it."""
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels))
    return f"{name}{{{body}}}" if body else name


def header(name: str, documentation: str, kind: str) -> str:
    """The ``# HELP`` and ``# TYPE`` lines of one family."""
    doc = documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


class HistogramChild:
    """One label set: counts per bucket (last one is +Inf) and the sum."""

    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count one value (bucket bounds are inclusive, like Prometheus's ``le``)."""
        self.counts[bisect_left(self._bounds, value)] += 1
        self.sum += value

    def observe_many(self, values: Iterable[float]) -> None:
        """Count several values at once (a record's inter-token gaps)."""
        bounds, counts = self._bounds, self.counts
        total = 0.0
        for value in values:
            counts[bisect_left(bounds, value)] += 1
            total += value
        self.sum += total


class LabelledHistogram(Collector):
    """A histogram family with fixed label names and explicit bucket bounds."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry | None = None,
    ) -> None:
        bounds = tuple(float(b) for b in buckets)
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError(f"{name}: bucket bounds must be increasing and unique")
        self.name, self.documentation = name, documentation
        self.labelnames = tuple(labelnames)
        self._bounds = bounds
        self._le = [floatToGoString(b) for b in bounds] + ["+Inf"]
        self._children: dict[tuple[str, ...], HistogramChild] = {}
        self._names: dict[tuple[str, ...], tuple[list[str], str, str]] = {}
        if registry is not None:
            registry.register(self)

    def labels(self, *values: str) -> HistogramChild:
        """The child for these label values, created (all zeros) on first use."""
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
            child = self._children.setdefault(values, HistogramChild(self._bounds))
        return child

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self._children.items()):
            counts, total = list(child.counts), child.sum
            cumulative, running = [], 0
            for le, n in zip(self._le, counts, strict=True):
                running += n
                cumulative.append((le, running))
            family.add_metric(list(values), cumulative, total)
        yield family

    def _series_names(self, values: tuple[str, ...]) -> tuple[list[str], str, str]:
        names = self._names.get(values)
        if names is None:
            pairs = list(zip(self.labelnames, values, strict=True))
            buckets = [
                f"{series_name(self.name + '_bucket', [*pairs, ('le', le)])} " for le in self._le
            ]
            count = f"{series_name(self.name + '_count', pairs)} "
            sum_ = f"{series_name(self.name + '_sum', pairs)} "
            names = self._names.setdefault(values, (buckets, count, sum_))
        return names

    def render(self) -> str:
        """This family in the text exposition format (what ``generate_latest`` would write)."""
        out = [header(self.name, self.documentation, "histogram")]
        for values, child in list(self._children.items()):
            counts, total = list(child.counts), child.sum
            buckets, count, sum_ = self._series_names(values)
            cumulative = list(accumulate(counts))
            out.extend([f"{name}{n}.0\n" for name, n in zip(buckets, cumulative, strict=True)])
            out.append(f"{count}{cumulative[-1]}.0\n{sum_}{floatToGoString(total)}\n")
        return "".join(out)


class Cell:
    """One label set's value of a counter or gauge."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


class LabelledValue(Collector):
    """A labelled counter (``kind="counter"``, exposed as ``NAME_total``) or gauge."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        kind: str = "counter",
        registry: CollectorRegistry | None = None,
    ) -> None:
        if kind not in ("counter", "gauge"):
            raise ValueError(f"{name}: kind must be counter or gauge")
        self.name, self.documentation, self.kind = name, documentation, kind
        self.labelnames = tuple(labelnames)
        self._cells: dict[tuple[str, ...], Cell] = {}
        if registry is not None:
            registry.register(self)

    def labels(self, *values: str) -> Cell:
        """The cell for these label values, created (zero) on first use."""
        cell = self._cells.get(values)
        if cell is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
            cell = self._cells.setdefault(values, Cell())
        return cell

    def _family(self) -> CounterMetricFamily | GaugeMetricFamily:
        if self.kind == "counter":
            return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        return GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def describe(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        family = self._family()
        for values, cell in list(self._cells.items()):
            family.add_metric(list(values), cell.value)
        yield family

    def render(self) -> str:
        """This family in the text exposition format (what ``generate_latest`` would write)."""
        name = f"{self.name}_total" if self.kind == "counter" else self.name
        out = [header(name, self.documentation, self.kind)]
        for values, cell in list(self._cells.items()):
            series = series_name(name, zip(self.labelnames, values, strict=True))
            out.append(f"{series} {floatToGoString(cell.value)}\n")
        return "".join(out)
