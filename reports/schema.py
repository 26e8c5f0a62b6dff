"""The typed ``summary.json``: frozen values for metric statistics, a phase, the comparison.

``reports.summary`` builds these from the records and writes their
``to_json()`` — the JSON is the contract (schema ``SCHEMA``; the renderers and
``reports compare`` read it back from disk), so ``to_json()`` keeps its keys
and their order exactly.  ``from_json`` reads a written block back.

A new block for a phase (harness health, capacity, vLLM export, ...) goes in
``PhaseStats.extra`` (kept in insertion order, after the fixed keys) or at the
top level of the summary; a new fixed statistic is a field here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loadtests.percentile import percentile

SCHEMA = 1
#: the percentiles every distribution in summary.json reports
PERCENTILES = (50, 90, 95, 99)


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
        xs = sorted(v * scale for v in values if v is not None and math.isfinite(v))
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
        return cls(**{k: d.get(k) for k in cls.__slots__ if k in d})  # type: ignore[arg-type]


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


@dataclass(frozen=True)
class PhaseStats:
    """One phase (or one scenario of it): counts, errors, distributions, rates."""

    mode: str
    count: int
    ok: int
    errors: dict[str, int]
    error_rate: float
    duration_s: float
    dists: dict[str, MetricStats]  # DISTRIBUTIONS, then any of OPEN_LOOP and SERVER present
    output_tokens_total: int
    output_tokens_per_s: float
    requests_per_s: float
    goodput_per_s: float
    slo_met: int
    slo_met_rate: float
    ttft_by_turn_ms: dict[str, MetricStats] | None = None
    multi_token_events: dict[str, int] | None = None
    token_count_mismatch: dict[str, float] | None = None
    #: blocks added after the statistics (scenarios, diagnostics, harness, ...), in order
    extra: dict[str, Any] = field(default_factory=dict)

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
        if self.multi_token_events is not None:
            out["multi_token_events"] = dict(self.multi_token_events)
        if self.token_count_mismatch is not None:
            out["token_count_mismatch"] = dict(self.token_count_mismatch)
        out.update({k: self.dists[k].to_json() for k in SERVER if k in self.dists})
        out.update(self.extra)
        return out


#: what the comparison compares, in summary.json's order
COMPARED: tuple[tuple[str, str], ...] = tuple(
    (metric, stat) for metric in ("ttft_ms", "e2e_ms") for stat in ("p50", "p95", "mean")
)


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    """Sync vs stream for one scenario (or ``all``): ok counts and the compared statistics."""

    sync_count: int
    stream_count: int
    sync: tuple[float | None, ...]  # one value per COMPARED
    stream: tuple[float | None, ...]

    @classmethod
    def of(cls, sync: Mapping[str, Any], stream: Mapping[str, Any]) -> ComparisonRow:
        """From two phase blocks (``PhaseStats.to_json()`` form)."""
        return cls(
            sync["ok"],
            stream["ok"],
            tuple(sync[m][s] for m, s in COMPARED),
            tuple(stream[m][s] for m, s in COMPARED),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sync_count": self.sync_count, "stream_count": self.stream_count}
        for (metric, stat), sv, tv in zip(COMPARED, self.sync, self.stream, strict=True):
            out[f"sync_{metric}_{stat}"] = sv
            out[f"stream_{metric}_{stat}"] = tv
            out[f"{metric}_{stat}_improvement_pct"] = (
                (sv - tv) / sv * 100.0 if sv and tv is not None else None
            )
        return out


@dataclass(frozen=True, slots=True)
class Comparison:
    """The seeds' table: sync vs streaming per scenario."""

    scenarios: dict[str, ComparisonRow]
    basis: str = "p50 of ok requests (p95 and mean also given)"

    def to_json(self) -> dict[str, Any]:
        return {
            "basis": self.basis,
            "scenarios": {k: row.to_json() for k, row in self.scenarios.items()},
        }
