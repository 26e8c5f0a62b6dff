"""What the gate can compare: one registry entry per metric, and ``--metric`` parsing.

A metric is a ``GateMetric``: its name on the command line, how it is read from
a run, which way is harm, its unit, and which evidence tells whether a starved
load generator could have moved it.  Three kinds:

* ``latency`` — per-request values in ms (``ttft``, ``ttfo``, ``e2e``, ``tpot``,
  ``itl``: every gap), compared by a percentile (``p95`` by default); harm is up;
* ``rate`` — a per-second series over the measured phases (``throughput``:
  output tokens arriving per second; ``goodput``: requests meeting every SLO,
  per second of completion), compared by its mean; harm is a *drop*;
* ``share`` — each request's outcome (``error-rate``: the share that failed),
  compared as a difference in percentage points; harm is up.

``--metric ttft:p99:5%,throughput:5%,error-rate:2%`` gives each its statistic and
allowance (``parse_metrics``); those not given take ``--percentile`` and
``--max-regression`` (``error-rate``: 1 point).  A metric a record does not
carry (``ttfo_s`` in a run from an older llmload) reads as no samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.summary import meets_slo

LATENCY, RATE, SHARE = "latency", "rate", "share"
UP, DOWN = "up", "down"
#: what judges a starved load generator for a metric: ``send`` (each request's send side,
#: t0 → last byte written: all the client can add to a time counted from t0) or ``lag``
#: (the event loop's lag: it can merge reads, slow the loop's pace, time out requests)
SEND, LAG = "send", "lag"
#: ``error-rate``'s default allowance: one percentage point
ERROR_RATE_ALLOWED = 0.01


def _seconds(attr: str) -> Callable[[RequestRecord], Iterable[float | None]]:
    def read(r: RequestRecord) -> Iterable[float | None]:
        return (getattr(r, attr, None),)  # an older record lacks a newer field: no sample

    return read


def _from_intended(attr: str) -> Callable[[RequestRecord], Iterable[float | None]]:
    def read(r: RequestRecord) -> Iterable[float | None]:
        v, d = getattr(r, attr), r.schedule_delay_s
        return (None if v is None or d is None else v + d,)

    return read


def _gaps(r: RequestRecord) -> Iterable[float | None]:
    return r.itl_s


@dataclass(frozen=True)
class GateMetric:
    """One metric the gate can compare (see the module docstring)."""

    name: str
    label: str
    kind: str
    harm: str
    unit: str
    evidence: str
    #: latency: the record's values in seconds (None entries are skipped)
    read: Callable[[RequestRecord], Iterable[float | None]] | None = None
    #: the default allowance when ``--metric`` gives none (None: ``--max-regression``)
    allowed: float | None = None
    #: shown in ``--metric``'s choices (the ``*_from_intended`` variants come from a flag)
    listed: bool = True


REGISTRY: dict[str, GateMetric] = {
    m.name: m
    for m in (
        GateMetric("ttft", "TTFT", LATENCY, UP, "ms", SEND, _seconds("ttft_s")),
        GateMetric("itl", "ITL", LATENCY, UP, "ms", LAG, _gaps),
        GateMetric("e2e", "E2E", LATENCY, UP, "ms", SEND, _seconds("e2e_s")),
        GateMetric("tpot", "TPOT", LATENCY, UP, "ms", LAG, _seconds("tpot_s")),
        GateMetric("ttfo", "TTFO", LATENCY, UP, "ms", SEND, _seconds("ttfo_s")),
        GateMetric(
            "ttft_from_intended",
            "TTFT from intended send",
            LATENCY,
            UP,
            "ms",
            SEND,
            _from_intended("ttft_s"),
            listed=False,
        ),
        GateMetric(
            "e2e_from_intended",
            "E2E from intended send",
            LATENCY,
            UP,
            "ms",
            SEND,
            _from_intended("e2e_s"),
            listed=False,
        ),
        GateMetric("throughput", "throughput", RATE, DOWN, "tokens/s", LAG),
        GateMetric("goodput", "goodput", RATE, DOWN, "req/s", LAG),
        GateMetric("error-rate", "error rate", SHARE, UP, "%", LAG, allowed=ERROR_RATE_ALLOWED),
    )
}
#: the names ``--metric`` accepts (``capacity`` is a gate of its own: ``reports.capacity.gate``)
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


def latency_ms(records: Iterable[RequestRecord], metric: GateMetric) -> list[float]:
    """The milliseconds of a latency metric over the successful records."""
    read = metric.read
    assert read is not None, metric.name
    return [
        v * 1000.0 for r in records if r.ok for v in read(r) if v is not None and math.isfinite(v)
    ]


def outcomes(records: Iterable[RequestRecord]) -> tuple[int, int]:
    """``(requests, failed)``; a request a lost worker took with it is neither."""
    n = bad = 0
    for r in records:
        if r.status == "lost":
            continue
        n += 1
        bad += not r.ok
    return n, bad


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


def _event_times(r: RequestRecord) -> list[tuple[float, float]]:
    """``(wall time, tokens)`` of each content event of an ok request (sync: one, at the end)."""
    if r.ttft_s is None or not r.output_tokens:
        return []
    t = r.started_at + r.ttft_s
    if r.mode == "sync" or not r.itl_s:
        return [(r.started_at + (r.e2e_s or r.ttft_s), float(r.output_tokens))]
    times = [t]
    for gap in r.itl_s:
        t += gap
        times.append(t)
    tpe = r.tokens_per_event
    if len(tpe) == len(times):
        return [(x, float(n)) for x, n in zip(times, tpe, strict=True)]
    each = r.output_tokens / len(times)
    return [(x, each) for x in times]


def per_second(
    records: Iterable[RequestRecord], metric: GateMetric, windows: Sequence[Window], slo: Any
) -> list[float]:
    """A rate metric's value in every whole second of ``windows`` (a partial last second is
    left out): output tokens that arrived in it, or requests meeting ``slo`` that ended in it."""
    bins: list[list[float]] = [[0.0] * int(end - start) for start, end in windows]
    if not any(bins):
        return []

    def add(t: float, amount: float) -> None:
        for (start, _), counts in zip(windows, bins, strict=True):
            k = int(math.floor(t - start))
            if 0 <= k < len(counts):
                counts[k] += amount
                return

    for r in records:
        if not r.ok:
            continue
        if metric.name == "throughput":
            for t, tokens in _event_times(r):
                add(t, tokens)
        elif meets_slo(r, slo) and r.e2e_s is not None:
            add(r.started_at + r.e2e_s, 1.0)
    return [x for counts in bins for x in counts]
