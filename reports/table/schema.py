"""The typed ``summary.json``: frozen values for metric statistics, a phase, sync vs stream.

``reports.summary.make`` builds these from the records and writes their
``to_json()`` — the JSON is the contract (schema ``SCHEMA``; the renderers and
``reports compare`` read it back from disk), so ``to_json()`` keeps its keys
and their order exactly.  ``from_json`` reads a written block back.

``Summary`` is the whole file: ``reports.summary.make.build_summary`` returns it and
every renderer (``reports.page.markdown``, ``html``, ``terminal``, ``two_runs``,
``rows``; ``reports.capacity.view``, ``reports.server.view``, ``reports.workloads.view``)
reads it.  Blocks owned
by other modules stay documented mappings inside it: ``PhaseStats.harness``
(``reports.table.trust.phase_health``), ``PhaseStats.diagnostics``
(``reports.table.diagnostics.Diagnostic.to_dict``), ``Summary.capacity``
(``reports.capacity.curve.capacity_summary``), ``Summary.trust``
(``reports.table.trust.assess``) and ``Summary.run`` (run.json, redacted).

A new block for a phase goes in ``PhaseStats.extra`` (kept in insertion order,
after the fixed keys) or, for the run, in ``Summary.extra``; a new fixed
statistic is a field here, written by ``to_json`` and read by ``from_json``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmload.loadtests.percentile import percentile

SCHEMA = 1
#: the percentiles every distribution in summary.json reports
PERCENTILES = (50, 90, 95, 99)


def finite_sorted(values: Iterable[float | None], scale: float = 1.0) -> list[float]:
    """The non-null finite values, each multiplied by ``scale``, sorted.

    Fast for a run's millions of gaps: the scaled values are taken in one list
    comprehension and their sum tells whether every one is finite (an inf or NaN
    makes it non-finite); only when it is not are they filtered value by value.
    """
    values = list(values)
    xs = [v * scale for v in values if v is not None]
    if not math.isfinite(sum(xs)):
        xs = [v * scale for v in values if v is not None and math.isfinite(v)]
    xs.sort()
    return xs


@dataclass(frozen=True, slots=True)
class MetricStats:
    """``n p50 p90 p95 p99 mean max`` of one distribution (None when it has no values)."""

    n: int = 0
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    mean: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: Iterable[float | None], scale: float = 1.0) -> MetricStats:
        """The statistics of the non-null finite values, each multiplied by ``scale``."""
        xs = finite_sorted(values, scale)
        if not xs:
            return cls()
        p50, p90, p95, p99 = (percentile(xs, p) for p in PERCENTILES)
        return cls(len(xs), p50, p90, p95, p99, math.fsum(xs) / len(xs), xs[-1])

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "p50": self.p50,
            "p90": self.p90,
            "p95": self.p95,
            "p99": self.p99,
            "mean": self.mean,
            "max": self.max,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> MetricStats:
        return cls(**{k: d.get(k) for k in cls.__slots__ if k in d})  # type: ignore[arg-type]  # the slots' types are the JSON's, checked by from_json's callers


#: the distributions every phase has, in summary.json's order
DISTRIBUTIONS = (
    "ttft_ms",
    "itl_ms",
    "tpot_ms",
    "e2e_ms",
    "itl_per_token_ms",
    "ttst_ms",
    "headers_ms",
    "output_tokens",
    "decode_tokens_per_s",
)
#: distributions a phase has only when its records carry them, in summary.json's order
OPEN_LOOP = ("schedule_delay_ms", "ttft_from_intended_ms", "e2e_from_intended_ms")
SERVER = ("client_minus_server_ttft_ms", "server_ttft_ms", "server_queue_ms")
#: answer shapes (``reports.table.answers``): TTFO, and tokens split when answers began with
#: reasoning
ANSWERS = ("ttfo_ms", "reasoning_tokens", "answer_tokens")
#: the client's own side of each request, when its records carry it: t0 to the last byte
#: written (``send_s``) and the set-up of new connections (``connect_s``), in this order
CLIENT = ("send_ms", "connect_ms")


@dataclass(frozen=True)
class PhaseStats:
    """One phase (or one scenario of it): counts, errors, distributions, rates."""

    mode: str
    count: int
    ok: int
    errors: dict[str, int]
    error_rate: float
    duration_s: float
    dists: dict[str, MetricStats]  # DISTRIBUTIONS, then any of OPEN_LOOP, SERVER, ANSWERS, CLIENT
    output_tokens_total: int
    output_tokens_per_s: float
    requests_per_s: float
    goodput_per_s: float
    slo_met: int
    slo_met_rate: float
    ttft_by_turn_ms: dict[str, MetricStats] | None = None
    #: ``--images``: TTFT by the number of images a request carried (where any had one)
    ttft_by_images_ms: dict[str, MetricStats] | None = None
    multi_token_events: dict[str, int] | None = None
    token_count_mismatch: dict[str, float] | None = None
    #: a phase's per-scenario statistics (None for a scenario itself)
    scenarios: dict[str, PhaseStats] | None = None
    #: the phase's protocol diagnostics (``Diagnostic.to_dict()`` each; None for a scenario)
    diagnostics: list[dict[str, Any]] | None = None
    #: the load generator's own health in the phase (``reports.table.trust.phase_health``)
    harness: dict[str, Any] | None = None
    #: blocks added after these, in order
    extra: dict[str, Any] = field(default_factory=dict)

    def dist(self, name: str) -> MetricStats:
        """One distribution; empty (``n`` 0) when the phase has none of it."""
        return self.dists.get(name) or MetricStats()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mode": self.mode,
            "count": self.count,
            "ok": self.ok,
            "errors": dict(self.errors),
            "error_rate": self.error_rate,
            "duration_s": self.duration_s,
        }
        out.update({k: self.dists[k].to_json() for k in DISTRIBUTIONS})
        out.update(
            output_tokens_total=self.output_tokens_total,
            output_tokens_per_s=self.output_tokens_per_s,
            requests_per_s=self.requests_per_s,
            goodput_per_s=self.goodput_per_s,
            slo_met=self.slo_met,
            slo_met_rate=self.slo_met_rate,
        )
        out.update({k: self.dists[k].to_json() for k in OPEN_LOOP if k in self.dists})
        if self.ttft_by_turn_ms is not None:
            out["ttft_by_turn_ms"] = {t: s.to_json() for t, s in self.ttft_by_turn_ms.items()}
        if self.ttft_by_images_ms is not None:
            by = self.ttft_by_images_ms
            out["ttft_by_images_ms"] = {k: s.to_json() for k, s in by.items()}
        if self.multi_token_events is not None:
            out["multi_token_events"] = dict(self.multi_token_events)
        if self.token_count_mismatch is not None:
            out["token_count_mismatch"] = dict(self.token_count_mismatch)
        out.update({k: self.dists[k].to_json() for k in SERVER if k in self.dists})
        out.update({k: self.dists[k].to_json() for k in ANSWERS if k in self.dists})
        out.update({k: self.dists[k].to_json() for k in CLIENT if k in self.dists})
        if self.scenarios is not None:
            out["scenarios"] = {k: g.to_json() for k, g in self.scenarios.items()}
        if self.diagnostics is not None:
            out["diagnostics"] = list(self.diagnostics)
        if self.harness is not None:
            out["harness"] = self.harness
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PhaseStats:
        """A phase block read back (a distribution an older file lacks reads as empty)."""
        dists = {k: MetricStats.from_json(d.get(k) or {}) for k in DISTRIBUTIONS}
        optional = (*OPEN_LOOP, *SERVER, *ANSWERS, *CLIENT)
        dists.update({k: MetricStats.from_json(d[k]) for k in optional if k in d})
        turns = d.get("ttft_by_turn_ms")
        images = d.get("ttft_by_images_ms")
        scenarios = d.get("scenarios")
        return cls(
            mode=d["mode"],
            count=d["count"],
            ok=d["ok"],
            errors=dict(d.get("errors") or {}),
            error_rate=d.get("error_rate", 0.0),
            duration_s=d.get("duration_s", 0.0),
            dists=dists,
            output_tokens_total=d.get("output_tokens_total", 0),
            output_tokens_per_s=d.get("output_tokens_per_s", 0.0),
            requests_per_s=d.get("requests_per_s", 0.0),
            goodput_per_s=d.get("goodput_per_s", 0.0),
            slo_met=d.get("slo_met", 0),
            slo_met_rate=d.get("slo_met_rate", 0.0),
            ttft_by_turn_ms=(
                None if turns is None else {t: MetricStats.from_json(s) for t, s in turns.items()}
            ),
            ttft_by_images_ms=(
                None if images is None else {k: MetricStats.from_json(s) for k, s in images.items()}
            ),
            multi_token_events=d.get("multi_token_events"),
            token_count_mismatch=d.get("token_count_mismatch"),
            scenarios=(
                None
                if scenarios is None
                else {k: PhaseStats.from_json(g) for k, g in scenarios.items()}
            ),
            diagnostics=d.get("diagnostics"),
            harness=d.get("harness"),
            extra={k: v for k, v in d.items() if k not in _PHASE_KEYS},
        )


#: the keys ``PhaseStats.from_json`` reads into fields (the rest go to ``extra``)
_PHASE_KEYS = frozenset(
    ("mode", "count", "ok", "errors", "error_rate", "duration_s", *DISTRIBUTIONS, *OPEN_LOOP)
    + (*SERVER, *ANSWERS, *CLIENT, "output_tokens_total", "output_tokens_per_s", "requests_per_s")
    + ("goodput_per_s", "slo_met", "slo_met_rate", "ttft_by_turn_ms", "multi_token_events")
    + ("ttft_by_images_ms",)
    + ("token_count_mismatch", "scenarios", "diagnostics", "harness")
)


#: what sync vs stream compares, in summary.json's order (its key ``comparison``)
COMPARED: tuple[tuple[str, str], ...] = tuple(
    (metric, stat) for metric in ("ttft_ms", "e2e_ms") for stat in ("p50", "p95", "mean")
)


@dataclass(frozen=True, slots=True)
class SyncVsStreamRow:
    """Sync vs stream for one scenario (or ``all``): ok counts and the compared statistics."""

    sync_count: int
    stream_count: int
    sync: tuple[float | None, ...]  # one value per COMPARED
    stream: tuple[float | None, ...]

    @classmethod
    def of(cls, sync: PhaseStats, stream: PhaseStats) -> SyncVsStreamRow:
        """From the sync and the streaming phase (or scenario)."""
        return cls(
            sync.ok,
            stream.ok,
            tuple(getattr(sync.dist(m), s) for m, s in COMPARED),
            tuple(getattr(stream.dist(m), s) for m, s in COMPARED),
        )

    def value(self, mode: str, metric: str, stat: str) -> float | None:
        """``value("sync", "ttft_ms", "p50")``: one compared statistic of one side."""
        side = self.sync if mode == "sync" else self.stream
        return side[COMPARED.index((metric, stat))]

    def improvement_pct(self, metric: str, stat: str) -> float | None:
        """How much lower streaming's statistic is than sync's, in % of sync's (None: unknown)."""
        sv, tv = self.value("sync", metric, stat), self.value("stream", metric, stat)
        return (sv - tv) / sv * 100.0 if sv and tv is not None else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sync_count": self.sync_count, "stream_count": self.stream_count}
        for (metric, stat), sv, tv in zip(COMPARED, self.sync, self.stream, strict=True):
            out[f"sync_{metric}_{stat}"] = sv
            out[f"stream_{metric}_{stat}"] = tv
            out[f"{metric}_{stat}_improvement_pct"] = self.improvement_pct(metric, stat)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SyncVsStreamRow:
        return cls(
            d["sync_count"],
            d["stream_count"],
            tuple(d.get(f"sync_{m}_{s}") for m, s in COMPARED),
            tuple(d.get(f"stream_{m}_{s}") for m, s in COMPARED),
        )


@dataclass(frozen=True, slots=True)
class SyncVsStream:
    """The seeds' table: sync vs streaming per scenario."""

    scenarios: dict[str, SyncVsStreamRow]
    basis: str = "p50 of ok requests (p95 and mean also given)"

    def to_json(self) -> dict[str, Any]:
        return {
            "basis": self.basis,
            "scenarios": {k: row.to_json() for k, row in self.scenarios.items()},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SyncVsStream:
        rows = {k: SyncVsStreamRow.from_json(r) for k, r in d["scenarios"].items()}
        return cls(rows, d["basis"]) if "basis" in d else cls(rows)


@dataclass(frozen=True, slots=True)
class InputStats:
    """What was read: records (warm-up included), corrupt lines, whether run.json was there."""

    records: int
    measured_records: int
    warmup_records: int
    corrupt_lines: int
    corrupt_line_numbers: list[int]  # the first 50
    run_json: str  # "ok" or "missing or unreadable"
    #: the last line, when it was cut short (the run stopped mid-write): among the corrupt
    cut_line: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "measured_records": self.measured_records,
            "warmup_records": self.warmup_records,
            "corrupt_lines": self.corrupt_lines,
            "corrupt_line_numbers": list(self.corrupt_line_numbers),
            "run_json": self.run_json,
            "cut_line": self.cut_line,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> InputStats:
        return cls(
            d.get("records", 0),
            d.get("measured_records", d.get("records", 0)),
            d.get("warmup_records", 0),
            d.get("corrupt_lines", 0),
            list(d.get("corrupt_line_numbers") or []),
            d.get("run_json", "ok"),
            d.get("cut_line"),
        )


@dataclass(frozen=True)
class Summary:
    """The whole ``summary.json``: ``to_json()`` is the file, ``from_json`` reads one back."""

    run_id: str
    label: str | None
    generated_at: str
    percentile_method: str
    slo_ms: dict[str, float]
    slo: str
    input: InputStats
    phases: dict[str, PhaseStats]
    #: sync vs stream, phase by phase (summary.json's key ``comparison``)
    sync_vs_stream: SyncVsStream | None
    #: every phase's diagnostics, one per code (``Diagnostic.to_dict()`` each)
    diagnostics: list[dict[str, Any]]
    #: ``reports.capacity.curve.capacity_summary`` (None: not a capacity run)
    capacity: dict[str, Any] | None
    #: run.json without its private keys, redacted
    run: dict[str, Any]
    #: ``reports.table.trust.assess`` (None only while the summary is being built)
    trust: dict[str, Any] | None = None
    schema: int = SCHEMA
    #: top-level blocks added after these, in order
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": self.schema,
            "run_id": self.run_id,
            "label": self.label,
            "generated_at": self.generated_at,
            "percentile_method": self.percentile_method,
            "slo_ms": dict(self.slo_ms),
            "slo": self.slo,
            "input": self.input.to_json(),
            "phases": {k: g.to_json() for k, g in self.phases.items()},
            "comparison": self.sync_vs_stream.to_json() if self.sync_vs_stream else None,
            "diagnostics": list(self.diagnostics),
            "capacity": self.capacity,
            "run": self.run,
            "trust": self.trust,
        }
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Summary:
        """A ``summary.json`` read back (``compare`` and ``ci`` on runs built earlier)."""
        comp = d.get("comparison")
        return cls(
            run_id=str(d.get("run_id", "")),
            label=d.get("label"),
            generated_at=str(d.get("generated_at", "")),
            percentile_method=str(d.get("percentile_method", "")),
            slo_ms=dict(d.get("slo_ms") or {}),
            slo=str(d.get("slo", "")),
            input=InputStats.from_json(d.get("input") or {}),
            phases={k: PhaseStats.from_json(g) for k, g in (d.get("phases") or {}).items()},
            sync_vs_stream=SyncVsStream.from_json(comp) if comp else None,
            diagnostics=list(d.get("diagnostics") or []),
            capacity=d.get("capacity"),
            run=dict(d.get("run") or {}),
            trust=d.get("trust"),
            schema=int(d.get("schema", SCHEMA)),
            extra={k: v for k, v in d.items() if k not in _SUMMARY_KEYS},
        )


_SUMMARY_KEYS = frozenset(
    ("schema", "run_id", "label", "generated_at", "percentile_method", "slo_ms", "slo")
    + ("input", "phases", "comparison", "diagnostics", "capacity", "run", "trust")
)
