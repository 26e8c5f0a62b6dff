"""``--web``: llmload's own tabs in locust's web UI, with the figures the report will show.

locust's table shows one entry per scenario and mode (one request = one count,
its response time the E2E latency), rounded the way locust stores times.  The
**llmload** tab shows what the report will: for every phase and scenario the
TTFT, TTST, ITL, TPOT and E2E percentiles and output tokens/s, computed by
``reports.summary.phase_with_scenarios`` — what ``summary.json`` is written from —
from the same records, and formatted as the report formats them.  The
**llmload errors & health** tab lists errors by class and each load-generator
process's latest health (CPU, event-loop lag, requests in flight).

It is a sink (records, phases, health) that also attaches to the web UI:
locust's ``extended_tabs``/``extended_tables`` template arguments, its
``/stats/requests`` poll extended with ``extended_stats``, and
``/llmload/stats`` (the raw statistics as JSON).  The statistics are recomputed
at most every ``min_interval`` seconds (longer if a computation took long), so a
busy page cannot slow the load generator down.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.run.sinks import HarnessHealth, NullSink
from llmload.loadtests.slo import parse_slo
from llmload.reports.fmt import fmt_ms, fmt_rate
from llmload.reports.summary import phase_with_scenarios

LATENCY_TAB, HEALTH_TAB = "llmload", "llmload-health"
_LATENCY = [
    ("phase", "Phase"),
    ("mode", "Mode"),
    ("scenario", "Scenario"),
    ("requests", "Requests"),
    ("errors", "Errors"),
    *(
        (f"{m}{p}", f"{m.upper()} p{p} ms")
        for m, ps in (
            ("ttft", (50, 90, 95, 99)),
            ("ttst", (50, 95)),
            ("itl", (50, 95, 99)),
            ("tpot", (50, 95)),
            ("e2e", (50, 95)),
        )
        for p in ps
    ),
    ("tokens", "Output tok/s"),
    ("goodput", "Goodput req/s"),
]
_HEALTH = [("kind", "What"), ("name", "Which"), ("value", "Value")]
_COLUMNS = {
    "ttft": "ttft_ms",
    "ttst": "ttst_ms",
    "itl": "itl_ms",
    "tpot": "tpot_ms",
    "e2e": "e2e_ms",
}


@dataclass
class _Phase:
    name: str
    mode: str
    started: float
    ended: float | None = None
    records: list[RequestRecord] = field(default_factory=list)


class LiveTab(NullSink):
    """The llmload tabs: a sink that keeps the run's records and shows their statistics."""

    def __init__(self, slo: str | None = None, min_interval: float = 2.0) -> None:
        self.slo = parse_slo(slo)
        self.min_interval = min_interval
        self.phases: dict[str, _Phase] = {}
        self.health: dict[str, HarnessHealth] = {}
        self._cache: dict[str, Any] | None = None
        self._next = 0.0

    # -- sink ----------------------------------------------------------------------

    def on_phase(self, name: str, mode: str, event: str, at: float) -> None:
        if event == "start":
            self.phases[name] = _Phase(name, mode, at)
        elif name in self.phases:
            self.phases[name].ended = at
        self._next = 0.0  # show a phase change at the next poll

    def on_record(self, record: RequestRecord) -> None:
        phase = self.phases.get(record.phase)
        if phase is None:
            phase = self.phases[record.phase] = _Phase(record.phase, record.mode, record.started_at)
        phase.records.append(record)

    def on_health(self, source: str, snapshot: HarnessHealth) -> None:
        self.health[source] = snapshot

    # -- statistics ------------------------------------------------------------------

    def stats(self, now: float | None = None) -> dict[str, Any]:
        """``{phase: summary.json's phase block + "warmup"}`` so far, and the health (cached)."""
        clock = time.monotonic()
        if self._cache is not None and clock < self._next:
            return self._cache
        now = time.time() if now is None else now
        phases: dict[str, Any] = {}
        for ph in self.phases.values():
            if not ph.records:
                continue
            span = max((ph.ended or now) - ph.started, 1e-9)
            stats = phase_with_scenarios(ph.records, span, self.slo).to_json()
            stats["warmup"] = ph.name == "warmup"
            phases[ph.name] = stats
        health = {src: asdict(h) for src, h in self.health.items()}
        self._cache = {"phases": phases, "health": health}
        cost = time.monotonic() - clock
        self._next = time.monotonic() + max(self.min_interval, 5 * cost)
        return self._cache

    def latency_rows(self) -> list[dict[str, Any]]:
        """One row per phase (scenario "all") and per phase and scenario."""
        rows = []
        for name, ph in self.stats()["phases"].items():
            label = f"{name} (warm-up: not in the report)" if ph["warmup"] else name
            rows.append(_row(label, ph["mode"], "all", ph))
            rows += [_row(label, ph["mode"], s, st) for s, st in ph["scenarios"].items()]
        return rows

    def health_rows(self) -> list[dict[str, Any]]:
        """Errors by class per phase, then each process's latest health."""
        stats = self.stats()
        rows = []
        for name, ph in stats["phases"].items():
            for cls, n in ph["errors"].items():
                rows.append({"kind": "errors", "name": f"{name}: {cls}", "value": str(n)})
            if not ph["errors"]:
                rows.append({"kind": "errors", "name": name, "value": "none"})
        for src, h in sorted(stats["health"].items()):
            value = (
                f"CPU {h['cpu_percent']:.0f}%, loop lag {h['loop_lag_s'] * 1000:.1f} ms, "
                f"{h['inflight']} in flight"
            )
            rows.append({"kind": "harness", "name": src, "value": value})
        return rows

    # -- locust's web UI -------------------------------------------------------------

    def attach(self, web_ui: Any) -> None:
        """Add the tabs, their data and ``/llmload/stats`` to a locust ``WebUI``."""
        args = web_ui.template_args
        args["extended_tabs"] = [
            {"title": "llmload", "key": LATENCY_TAB},
            {"title": "llmload errors & health", "key": HEALTH_TAB},
        ]
        args["extended_tables"] = [
            {"key": LATENCY_TAB, "structure": [{"key": k, "title": t} for k, t in _LATENCY]},
            {"key": HEALTH_TAB, "structure": [{"key": k, "title": t} for k, t in _HEALTH]},
        ]
        app = web_ui.app

        @app.route("/llmload/stats")
        def llmload_stats() -> Any:
            return app.response_class(
                json.dumps(self.stats(), allow_nan=False), mimetype="application/json"
            )

        @app.after_request
        def extend_stats(response: Any) -> Any:
            from flask import request

            if request.path != "/stats/requests" or response.status_code != 200:
                return response
            data = response.get_json(silent=True)
            if isinstance(data, dict):
                data["extended_stats"] = [
                    {"key": LATENCY_TAB, "data": self.latency_rows()},
                    {"key": HEALTH_TAB, "data": self.health_rows()},
                ]
                response.set_data(json.dumps(data))
            return response


def _row(phase: str, mode: str, scenario: str, st: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "phase": phase,
        "mode": mode,
        "scenario": scenario,
        "requests": str(st["count"]),
        "errors": str(st["count"] - st["ok"]),
        "tokens": fmt_rate(st["output_tokens_per_s"]),
        "goodput": fmt_rate(st["goodput_per_s"]),
    }
    for key, _ in _LATENCY:
        metric, pct = key.rstrip("0123456789"), key[len(key.rstrip("0123456789")) :]
        if metric in _COLUMNS and pct:
            row[key] = fmt_ms(st[_COLUMNS[metric]][f"p{pct}"])
    return row
