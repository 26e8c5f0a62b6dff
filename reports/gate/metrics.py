"""What the gate can compare: one registry entry per metric, and ``--metric`` parsing.

A metric is a ``GateMetric``: its name on the command line, how it is read from
a run, which way is harm, its unit, and which evidence tells whether a starved
load generator could have moved it.  Three kinds:

* ``latency`` — per-request values in ms (``ttft``, ``ttfo``, ``e2e``, ``tpot``,
  ``itl``: every gap), compared by a percentile (``p95`` by default); harm is up;
* ``rate`` — a per-second series over the measured phases (``throughput``:
  output tokens arriving per second; ``goodput``: requests meeting every SLO,
  per second of completion), compared by its mean; harm is a *drop*;
  ``energy`` is a rate too: the GPUs' joules per output token in each second
  (``--gpu-metrics``; ``energy_per_second``), compared by its mean; harm is up;
* ``share`` — each request's outcome (``error-rate``: the share that failed),
  compared as a difference in percentage points; harm is up.

``--metric ttft:p99:5%,throughput:5%,error-rate:2%`` gives each its statistic and
allowance (``parse_metrics``); those not given take ``--percentile`` and
``--max-regression`` (``error-rate``: 1 point).  A metric a record does not
carry (``ttfo_s`` in a run from an older llmload) reads as no samples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.server import gpu
from llmload.reports.summary.make import meets_slo
from llmload.reports.table.columns import RecordTable
from llmload.reports.table.scrapes import ServerRun

LATENCY, RATE, SHARE = "latency", "rate", "share"
UP, DOWN = "up", "down"
#: what judges a starved load generator for a metric: ``send`` (each request's send side,
#: t0 → last byte written: all the client can add to a time counted from t0) or ``lag``
#: (the event loop's lag: it can merge reads, slow the loop's pace, time out requests)
SEND, LAG = "send", "lag"
#: ``error-rate``'s default allowance: one percentage point
ERROR_RATE_ALLOWED = 0.01


@dataclass(frozen=True)
class GateMetric:
    """One metric the gate can compare (see the module docstring)."""

    name: str
    label: str
    kind: str
    harm: str
    unit: str
    evidence: str
    #: latency: the record field (a column) read, in seconds (``itl_s``: every gap); a record
    #: without a value (None, or an older record that lacks the field) gives no sample
    column: str | None = None
    #: latency: each value plus its record's schedule delay (records without one: no sample)
    from_intended: bool = False
    #: the default allowance when ``--metric`` gives none (None: ``--max-regression``)
    allowed: float | None = None
    #: shown in ``--metric``'s choices (the ``*_from_intended`` variants come from a flag)
    listed: bool = True


REGISTRY: dict[str, GateMetric] = {
    m.name: m
    for m in (
        GateMetric("ttft", "TTFT", LATENCY, UP, "ms", SEND, "ttft_s"),
        GateMetric("itl", "ITL", LATENCY, UP, "ms", LAG, "itl_s"),
        GateMetric("e2e", "E2E", LATENCY, UP, "ms", SEND, "e2e_s"),
        GateMetric("tpot", "TPOT", LATENCY, UP, "ms", LAG, "tpot_s"),
        GateMetric("ttfo", "TTFO", LATENCY, UP, "ms", SEND, "ttfo_s"),
        GateMetric(
            "ttft_from_intended",
            "TTFT from intended send",
            LATENCY,
            UP,
            "ms",
            SEND,
            "ttft_s",
            from_intended=True,
            listed=False,
        ),
        GateMetric(
            "e2e_from_intended",
            "E2E from intended send",
            LATENCY,
            UP,
            "ms",
            SEND,
            "e2e_s",
            from_intended=True,
            listed=False,
        ),
        GateMetric("throughput", "throughput", RATE, DOWN, "tokens/s", LAG),
        GateMetric("goodput", "goodput", RATE, DOWN, "req/s", LAG),
        GateMetric("error-rate", "error rate", SHARE, UP, "%", LAG, allowed=ERROR_RATE_ALLOWED),
        # the GPUs' joules per output token, a second at a time (``energy_per_second``)
        GateMetric("energy", "GPU energy per output token", RATE, UP, "J/token", LAG),
    )
}
#: the names ``--metric`` accepts (``capacity`` is a gate of its own: ``reports.gate.capacity``)
CHOICES = tuple(name for name, m in REGISTRY.items() if m.listed)
LATENCY_METRICS = tuple(name for name, m in REGISTRY.items() if m.kind == LATENCY)
RATE_METRICS = tuple(name for name, m in REGISTRY.items() if m.kind == RATE)
#: ``--from-intended`` turns these into their open-loop variants
FROM_INTENDED = {"ttft": "ttft_from_intended", "e2e": "e2e_from_intended"}


@dataclass(frozen=True)
class MetricSpec:
    """A metric as gated: its percentile (latency) and allowed change (a fraction)."""

    metric: GateMetric
    percentile: float | None
    allowed: float

    @property
    def name(self) -> str:
        """``ttft p95``, ``throughput``: how checks and tables name it."""
        m = self.metric
        shown = m.name.replace("_from_intended", " from intended send")
        return f"{shown} p{self.percentile:g}" if self.percentile is not None else shown

    @property
    def allowed_text(self) -> str:
        """``+10%``, ``−5%`` (a drop), ``+1 point``."""
        if self.metric.kind == SHARE:
            points = self.allowed * 100
            return f"+{points:g} point" + ("" if points == 1 else "s")
        sign = "−" if self.metric.harm == DOWN else "+"
        return f"{sign}{self.allowed * 100:g}%"


def _fraction(text: str, item: str) -> float:
    t = text.strip()
    try:
        value = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"--metric {item!r}: {text!r} is not an allowance (10% or 0.1)") from None
    if value < 0 or not math.isfinite(value):
        raise ValueError(f"--metric {item!r}: the allowance must not be negative")
    return value


def parse_metrics(
    spec: str, percentile: float = 95.0, allowed: float = 0.10, from_intended: bool = False
) -> list[MetricSpec]:
    """``"ttft,itl:p99,throughput:5%"`` -> specs, in order; ``ValueError`` naming a bad part."""
    out: list[MetricSpec] = []
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, *rest = item.split(":")
        name = name.strip().lower().replace("_", "-")
        name = {"error-rate": "error-rate", "errors": "error-rate"}.get(name, name)
        if name not in CHOICES:
            raise ValueError(
                f"--metric: unknown metric {name!r}; choose from {', '.join(CHOICES)} "
                "(or capacity, alone)"
            )
        if from_intended:
            if name not in FROM_INTENDED:
                raise ValueError(f"--from-intended must go with --metric ttft or e2e, not {name}")
            name = FROM_INTENDED[name]
        metric = REGISTRY[name]
        q: float | None = percentile if metric.kind == LATENCY else None
        allow = metric.allowed if metric.allowed is not None else allowed
        if len(rest) > 2:
            raise ValueError(f"--metric {item!r}: expected NAME[:pQ][:ALLOWED]")
        for part in rest:
            part = part.strip()
            if part.lower().startswith("p"):
                if metric.kind != LATENCY:
                    raise ValueError(f"--metric {item!r}: {name} is not compared by a percentile")
                try:
                    q = float(part[1:])
                except ValueError:
                    raise ValueError(f"--metric {item!r}: {part!r} is not a percentile") from None
                if not 0 < q < 100:
                    raise ValueError(f"--metric {item!r}: the percentile must be in (0, 100)")
            else:
                allow = _fraction(part, item)
        if any(s.metric.name == metric.name and s.percentile == q for s in out):
            raise ValueError(f"--metric: {item!r} is given twice")
        out.append(MetricSpec(metric, q, allow))
    if not out:
        raise ValueError("--metric: name at least one metric")
    return out


# -- reading a run ------------------------------------------------------------------------
#
# Each takes a group of records — a ``RecordTable`` (``reports.table.columns``), as a loaded run
# holds them, or record objects, made one — and reads its columns: the values each record
# gives, in record order, without a record object per request.


def latency_ms(records: Iterable[RequestRecord], metric: GateMetric) -> np.ndarray:
    """The milliseconds of a latency metric over the successful records, record by record
    (ITL: every gap): a new array, the caller's own."""
    column = metric.column
    assert column is not None, metric.name
    t = RecordTable.of(records)
    ok = t.ok()
    if column == "itl_s":
        values = t.itl(ok, copy=True)
    else:
        values = t.num(column)[ok]
        if metric.from_intended:
            values = values + t.num("schedule_delay_s")[ok]
    finite = np.isfinite(values)  # (None, a field the record lacks: NaN)
    if not finite.all():
        values = values[finite]
    del finite
    values *= 1000.0
    return values


def gap_groups(records: Iterable[RequestRecord]) -> np.ndarray:
    """How many gaps each successful record has, in the order ``latency_ms`` gives them."""
    t = RecordTable.of(records)
    return t.itl_counts()[t.ok()]


def outcomes(records: Iterable[RequestRecord]) -> tuple[int, int]:
    """``(requests, failed)``; a request a lost worker took with it is neither."""
    t = RecordTable.of(records)
    lost = t.is_("status", "lost")
    return len(t) - int(lost.sum()), int((~t.ok() & ~lost).sum())


Window = tuple[float, float]


def phase_windows(
    meta: dict[str, Any], phases: Sequence[str], starts: dict[str, float] | None = None
) -> list[Window]:
    """The wall-clock spans of ``phases`` in run.json: from the phase start (or where its
    steady state began, ``starts``) to the planned end (``--duration``), or its end."""
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    planned = config.get("duration") if isinstance(config, dict) else None
    out = []
    for ph in meta.get("phases") or []:
        if not isinstance(ph, dict) or ph.get("name") not in phases:
            continue
        try:
            start, end = float(ph["started_at"]), float(ph["ended_at"])
        except (KeyError, TypeError, ValueError):
            continue
        if isinstance(planned, int | float) and planned > 0:
            end = min(end, start + float(planned))
        start = max(start, (starts or {}).get(str(ph["name"]), start))
        if end > start:
            out.append((start, end))
    return out


#: records per pass of ``_events`` (bounds the memory of one pass: their events' times)
EVENT_CHUNK = 16384


def _events(t: RecordTable) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(wall times, tokens)`` of the content events of ``t``'s ok requests that have a TTFT
    and output tokens, request by request in record order, a chunk of records at a time.

    A sync request, or a stream without gaps, is one event of all its tokens at its end
    (its E2E, else its TTFT); a stream's events are its first token and each gap after it,
    each with its ``tokens_per_event`` entry when it has one per event, else an equal share
    of its output tokens."""
    for a in range(0, len(t), EVENT_CHUNK):
        c = t[a : a + EVENT_CHUNK]
        ttft, tokens = c.num("ttft_s"), c.num("output_tokens")
        keep = c.ok() & ~np.isnan(ttft) & ~np.isnan(tokens) & (tokens != 0)
        c, ttft, tokens = c.where(keep), ttft[keep], tokens[keep]
        if not len(c):
            continue
        started, e2e, counts = c.num("started_at"), c.num("e2e_s"), c.itl_counts()
        single = c.is_("mode", "sync") | (counts == 0)
        sizes = np.where(single, 1, counts + 1)
        offsets = np.cumsum(sizes) - sizes
        times = np.empty(int(sizes.sum()), dtype=np.float64)
        amounts = np.empty_like(times)
        ended = np.where(np.isnan(e2e) | (e2e == 0), ttft, e2e)  # (``e2e_s or ttft_s``)
        times[offsets[single]] = (started + ended)[single]
        amounts[offsets[single]] = tokens[single]
        multi = ~single
        if multi.any():
            streams = c.where(multi)
            n = sizes[multi]
            at = np.repeat(offsets[multi] - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
            times[at] = streams.arrivals(started[multi] + ttft[multi])
            per_event = streams.tpe_lengths() == n
            ones = per_event & streams.tpe_ones()
            each = np.where(ones, 1.0, tokens[multi] / n)
            amounts[at] = np.repeat(each, n)
            starts = offsets[multi]
            for i in np.flatnonzero(per_event & ~ones).tolist():
                amounts[starts[i] : starts[i] + n[i]] = streams.tokens_per_event(i)
        yield times, amounts


def _bin(windows: Sequence[Window], bins: list[np.ndarray], at: np.ndarray, amount: Any) -> None:
    """Add ``amount`` (one per time, or one for all) to the whole second of the first window
    each time falls in, in the times' order (each bin's sum as the same additions give it)."""
    left = np.ones(len(at), dtype=bool)
    amounts = np.broadcast_to(np.asarray(amount, dtype=np.float64), at.shape)
    for (start, _), counts in zip(windows, bins, strict=True):
        k = np.floor(at - start)
        hit = left & (k >= 0) & (k < len(counts))
        if hit.any():
            np.add.at(counts, k[hit].astype(np.int64), amounts[hit])
            left &= ~hit


def settled(windows: Sequence[Window], t: RecordTable) -> list[Window]:
    """Each window from the first whole second after its first complete answer (of an ok
    request started in it); a window with none is kept as it is."""
    started, e2e = t.num("started_at"), t.num("e2e_s")
    complete = t.ok() & ~np.isnan(e2e)
    out = []
    for start, end in windows:
        inside = complete & (started >= start) & (started < end)
        if inside.any():
            first = float((started + e2e)[inside].min())
            start += min(max(0, math.ceil(first - start)), max(0, int(end - start)))
        out.append((start, end))
    return out


def per_second(
    records: Iterable[RequestRecord], metric: GateMetric, windows: Sequence[Window], slo: Any
) -> list[float]:
    """A rate metric's value in every whole second of ``windows`` (a partial last second is
    left out): output tokens that arrived in it, or requests meeting ``slo`` that ended in it.

    The seconds before a window's first answer was complete are left out too (``settled``):
    the phase starts with nothing in flight, so its first second held about half the tokens
    of the next ones (8 users, 0.65 s answers: 105 against ~240), and that one ramp second
    widened the bootstrap of the mean enough to make an A/A pair "too noisy" 5 times in 21.
    """
    t = RecordTable.of(records)
    windows = settled(windows, t)
    bins = [np.zeros(int(end - start)) for start, end in windows]
    if not any(len(b) for b in bins):
        return []
    if metric.name == "throughput":
        for at, tokens in _events(t):
            _bin(windows, bins, at, tokens)
    else:
        e2e = t.num("e2e_s")
        good = meets_slo(t, slo) & ~np.isnan(e2e)
        _bin(windows, bins, (t.num("started_at") + e2e)[good], 1.0)
    return [x for counts in bins for x in counts.tolist()]


def energy_per_second(
    records: Iterable[RequestRecord], gr: ServerRun | None, windows: Sequence[Window]
) -> list[float]:
    """The GPUs' joules per output token in every whole second of ``windows`` that the GPU
    scrapes cover and in which tokens arrived (the same seconds and tokens as
    ``throughput``): the energy is the scrapes' cumulative energy
    (``reports.server.gpu.cumulative_energy``) read at the second's edges, linearly between
    scrapes.  Empty without GPU scrapes."""
    if gr is None:
        return []
    times, joules = gpu.cumulative_energy(gr)
    if len(times) < 2:
        return []
    t = RecordTable.of(records)
    windows = settled(windows, t)
    bins = [np.zeros(int(end - start)) for start, end in windows]
    for at, tokens in _events(t):
        _bin(windows, bins, at, tokens)
    out = []
    for (start, _), tokens in zip(windows, bins, strict=True):
        edges = start + np.arange(len(tokens) + 1, dtype=np.float64)
        energy = np.diff(np.interp(edges, times, joules))
        covered = (edges[:-1] >= times[0]) & (edges[1:] <= times[-1]) & (tokens > 0)
        out += (energy[covered] / tokens[covered]).tolist()
    return out
