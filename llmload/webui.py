"""``--web``: llmload's own tabs in locust's web UI, with the figures the report will show.

locust's table shows one entry per scenario and mode (one request = one count,
its response time the E2E latency), rounded the way locust stores times.  The
**llmload** tab shows what the report will: for every phase and scenario the
TTFT, TTST, ITL, TPOT and E2E percentiles and output tokens/s, computed by
``reports.summary.make.phase_with_scenarios`` — what ``summary.json`` is written from —
from the same records, and formatted as the report formats them.  The
**llmload errors & health** tab lists errors by class and each load-generator
process's latest health (CPU, event-loop lag, requests in flight).

It is a sink (records, phases, health) that also attaches to the web UI:
locust's ``extended_tabs``/``extended_tables`` template arguments, its
``/stats/requests`` poll extended with ``extended_stats``, and
``/llmload/stats`` (the raw statistics as JSON).  The statistics are recomputed
at most every ``min_interval`` seconds (longer if a computation took long), so a
busy page cannot slow the load generator down.

The tab keeps at most ``max_records`` records per phase (the latest; 100,000 by
default), so an hour-long run does not grow the load generator's memory with
it: past that the latencies are those of the latest records (the row says
"latest N of M") and the rates are over the time those records span, while the
request and error counts stay the whole phase's.
"""

from __future__ import annotations

import json
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.run.sinks import HarnessHealth, NullSink
from llmload.loadtests.slo import parse_slo
from llmload.reports.draw.fmt import fmt_ms, fmt_rate
from llmload.reports.summary.make import phase_with_scenarios

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


#: records kept per phase for the tab's statistics (the latest)
MAX_RECORDS = 100_000


@dataclass
class _Phase:
    name: str
    mode: str
    started: float
    limit: int = MAX_RECORDS
    ended: float | None = None
    records: deque[RequestRecord] = field(default_factory=deque)
    #: the whole phase's records and failures by class (the window holds the latest)
    seen: int = 0
    failed: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.records = deque(self.records, maxlen=self.limit)


class LiveTab(NullSink):
    """The llmload tabs: a sink that keeps the run's latest records and shows their statistics."""

    def __init__(
        self, slo: str | None = None, min_interval: float = 2.0, max_records: int = MAX_RECORDS
    ) -> None:
        self.slo = parse_slo(slo)
        self.min_interval = min_interval
        self.max_records = max_records
        self.phases: dict[str, _Phase] = {}
        self.health: dict[str, HarnessHealth] = {}
        self._cache: dict[str, Any] | None = None
        self._next = 0.0

    # -- sink ----------------------------------------------------------------------

    def on_phase(self, name: str, mode: str, event: str, at: float) -> None:
        if event == "start":
            self.phases[name] = _Phase(name, mode, at, self.max_records)
        elif name in self.phases:
            self.phases[name].ended = at
        self._next = 0.0  # show a phase change at the next poll

    def on_record(self, record: RequestRecord) -> None:
        phase = self.phases.get(record.phase)
        if phase is None:
            phase = _Phase(record.phase, record.mode, record.started_at, self.max_records)
            self.phases[record.phase] = phase
        phase.records.append(record)
        phase.seen += 1
        if not record.ok:
            phase.failed[record.status] += 1

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
            window = list(ph.records)
            began = ph.started if ph.seen == len(window) else window[0].started_at
            span = max((ph.ended or now) - began, 1e-9)
            summary = phase_with_scenarios(window, span, self.slo)
            if ph.seen > len(window):  # the counts are the whole phase's
                failed = sum(ph.failed.values())
                summary = replace(
                    summary,
                    count=ph.seen,
                    ok=ph.seen - failed,
                    errors=dict(ph.failed),
                    error_rate=failed / ph.seen,
                )
            stats = summary.to_json()
            stats["warmup"] = ph.name == "warmup"
            stats["window"] = {"records": len(window), "of": ph.seen}
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
            window = ph["window"]
            if window["records"] < window["of"]:
                label += f" (latencies: latest {window['records']:,} of {window['of']:,})"
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
