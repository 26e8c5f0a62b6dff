"""Build the typed summary (``reports.schema.Summary``; its ``to_json()`` is ``summary.json``):
per phase and per scenario statistics, comparison, diagnostics, harness health, trust."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from llmload.loadtests.measure.record import ERROR_CLASSES, RequestRecord
from llmload.loadtests.redact import redact_value
from llmload.loadtests.slo import format_slo, parse_slo
from llmload.reports import diagnostics
from llmload.reports.answers import answer_stats
from llmload.reports.capacity.curve import capacity_summary
from llmload.reports.loader import Run, is_warmup
from llmload.reports.schema import (
    Comparison,
    ComparisonRow,
    InputStats,
    MetricStats,
    PhaseStats,
    Summary,
)
from llmload.reports.server.attach import attach as attach_server
from llmload.reports.spread import repeats_of, report_spread
from llmload.reports.stats import PERCENTILE_METHOD
from llmload.reports.steady import steady_states
from llmload.reports.timeseries import per_token_gaps
from llmload.reports.trust import assess, phase_health
from llmload.reports.workloads import phase_blocks

MS = 1000.0


def meets_slo(r: RequestRecord, slo: dict[str, float]) -> bool:
    """An ok request that met every configured SLO (TPOT only when the request has one)."""
    if not r.ok:
        return False
    checks = {"ttft": r.ttft_s, "e2e": r.e2e_s, "tpot": r.tpot_s}
    for name, limit_ms in slo.items():
        value = checks.get(name)
        if value is None:
            if name == "tpot":
                continue
            return False
        if value * MS > limit_ms:
            return False
    return True


def _span_s(records: Sequence[RequestRecord]) -> float:
    """Wall time covered by the records (first start to last end) when no phase times exist."""
    start = min(r.started_at for r in records)
    end = max(r.started_at + (r.e2e_s or 0.0) for r in records)
    return max(end - start, 1e-9)


def phase_stats(
    records: Sequence[RequestRecord],
    duration_s: float,
    slo: dict[str, float],
    client_counts_events: bool = False,
) -> PhaseStats:
    """Counts, errors by class, latency distributions (ms) and rates for one group of records.

    ``client_counts_events``: the run had no ``--tokenizer``, so the client's count is
    of content events; a difference from the server's usage then means events that
    carried several tokens (``multi_token_events``), not a token-count mismatch.
    """
    ok = [r for r in records if r.ok]
    errors = Counter(r.status for r in records if not r.ok)
    modes = sorted({r.mode for r in records})
    of = MetricStats.of
    dists = {
        "ttft_ms": of((r.ttft_s for r in ok), MS),
        "itl_ms": of((g for r in ok for g in r.itl_s), MS),
        "tpot_ms": of((r.tpot_s for r in ok), MS),
        "e2e_ms": of((r.e2e_s for r in ok), MS),
        "itl_per_token_ms": of((g for r in ok for g in per_token_gaps(r)), MS),
        "ttst_ms": of((r.ttst_s for r in ok), MS),
        "headers_ms": of((r.headers_s for r in ok), MS),
        "output_tokens": of(r.output_tokens for r in ok),
        "decode_tokens_per_s": of(1.0 / r.tpot_s for r in ok if r.tpot_s),
    }
    delayed = [r for r in ok if r.schedule_delay_s is not None]
    if delayed:
        dists["schedule_delay_ms"] = of((r.schedule_delay_s for r in delayed), MS)
        dists["ttft_from_intended_ms"] = of(
            (r.ttft_s + (r.schedule_delay_s or 0.0) for r in delayed if r.ttft_s is not None), MS
        )
        dists["e2e_from_intended_ms"] = of(
            (r.e2e_s + (r.schedule_delay_s or 0.0) for r in delayed if r.e2e_s is not None), MS
        )
    timed = [r for r in ok if r.mode == "stream" and r.ttft_s is not None]
    timed = [r for r in timed if r.server_ttft_s is not None]
    if timed:
        dists["client_minus_server_ttft_ms"] = of(
            ((r.ttft_s or 0.0) - (r.server_ttft_s or 0.0) for r in timed), MS
        )
        dists["server_ttft_ms"] = of((r.server_ttft_s for r in timed), MS)
        dists["server_queue_ms"] = of((r.server_queue_s for r in timed), MS)
    shapes, answers = answer_stats(ok)
    dists.update(shapes)
    for key, attr in (("send_ms", "send_s"), ("connect_ms", "connect_s")):
        seen = [v for r in records if (v := getattr(r, attr)) is not None]
        if seen:
            dists[key] = of(seen, MS)
    turns = sorted({r.turn for r in ok})
    by_turn = (
        {str(t): of((r.ttft_s for r in ok if r.turn == t), MS) for t in turns}
        if len(turns) > 1
        else None
    )
    multi: dict[str, int] | None = None
    mismatch: dict[str, float] | None = None
    both = [r for r in records if r.usage_output_tokens is not None]
    # a tool call's usage counts the call's markup, which the client never sees as text; an
    # answer with no visible output is counted on its own (``reports.answers``)
    both = [r for r in both if r.client_output_tokens is not None]
    both = [r for r in both if not r.tool_calls and not r.no_output]
    if both and client_counts_events:
        more = sum(r.usage_output_tokens != r.client_output_tokens for r in both)
        if more:
            multi = {"compared": len(both), "requests": more}
    elif both:
        bad = sum(r.usage_output_tokens != r.client_output_tokens for r in both)
        mismatch = {"compared": len(both), "mismatched": bad, "rate": bad / len(both)}
    total_tokens = sum(r.output_tokens or 0 for r in records)
    good = sum(meets_slo(r, slo) for r in records)
    return PhaseStats(
        mode=modes[0] if len(modes) == 1 else "mixed",
        count=len(records),
        ok=len(ok),
        errors={c: errors[c] for c in (*ERROR_CLASSES, *sorted(errors)) if errors.get(c)},
        error_rate=(len(records) - len(ok)) / len(records) if records else 0.0,
        duration_s=duration_s,
        dists=dists,
        output_tokens_total=total_tokens,
        output_tokens_per_s=total_tokens / duration_s,
        requests_per_s=len(records) / duration_s,
        goodput_per_s=good / duration_s,
        slo_met=good,
        slo_met_rate=good / len(records) if records else 0.0,
        ttft_by_turn_ms=by_turn,
        multi_token_events=multi,
        token_count_mismatch=mismatch,
        extra={"answers": answers} if answers else {},
    )


def phase_with_scenarios(
    records: Sequence[RequestRecord],
    duration_s: float,
    slo: dict[str, float],
    client_counts_events: bool = False,
) -> PhaseStats:
    """``phase_stats`` of a phase's records with each scenario's (the live web UI shows these)."""
    stats = phase_stats(records, duration_s, slo, client_counts_events)
    names = list(dict.fromkeys(r.scenario for r in records))
    if len(names) == 1:  # one scenario (a dataset, a single prompt file): the same statistics
        return replace(stats, scenarios={names[0]: stats})
    scenarios = {
        scen: phase_stats(
            [r for r in records if r.scenario == scen], duration_s, slo, client_counts_events
        )
        for scen in names
    }
    return replace(stats, scenarios=scenarios)


def _phase_durations(meta: dict[str, Any]) -> dict[str, float]:
    """``{phase: seconds}`` from run.json's phases (summed when a name repeats)."""
    out: dict[str, float] = {}
    for ph in meta.get("phases") or []:
        try:
            span = float(ph["ended_at"]) - float(ph["started_at"])
        except (KeyError, TypeError, ValueError):
            continue
        if span > 0:
            out[ph["name"]] = out.get(ph["name"], 0.0) + span
    return out


def _ordered_phases(meta: dict[str, Any], records: Iterable[RequestRecord]) -> list[str]:
    names = [ph.get("name") for ph in meta.get("phases") or [] if isinstance(ph, dict)]
    names += [r.phase for r in records]
    return list(dict.fromkeys(n for n in names if n and n != "warmup"))


def comparison(phases: dict[str, PhaseStats]) -> Comparison | None:
    """Sync vs stream per scenario (p50, p95 and mean TTFT/total, improvement %) when both exist."""
    sync = next((p for p in phases.values() if p.mode == "sync"), None)
    stream = next((p for p in phases.values() if p.mode == "stream"), None)
    if sync is None or stream is None:
        return None
    a, b = sync.scenarios or {}, stream.scenarios or {}
    pairs = [("all", sync, stream)] + [(name, a[name], b[name]) for name in a if name in b]
    return Comparison({name: ComparisonRow.of(x, y) for name, x, y in pairs})


def _diagnose(records: Sequence[RequestRecord], mode: str) -> list[dict[str, Any]]:
    """The protocol diagnostics of one phase (``reports.diagnostics.detect``), as dicts."""
    return [d.to_dict() for d in diagnostics.detect(records, mode)]


def build_summary(run: Run, slo_spec: str | None = None) -> Summary:
    """The whole summary for ``run`` (pure: reads nothing but ``run``)."""
    slo = parse_slo(slo_spec)
    measured = run.measured
    durations = _phase_durations(run.meta)
    health = phase_health(run.meta)
    phases: dict[str, PhaseStats] = {}
    config = run.meta.get("config")
    events = isinstance(config, dict) and "tokenizer" in config and not config["tokenizer"]
    steady = steady_states(run.meta, run.records)
    for name in _ordered_phases(run.meta, measured):
        recs = [r for r in measured if r.phase == name]
        if not recs:
            continue
        duration = durations.get(name) or _span_s(recs)
        if name in steady and steady[name].applied:  # --warmup auto: the steady part's time
            duration = max(duration - steady[name].start_s, 1e-9)
        stats = phase_with_scenarios(recs, duration, slo, events)
        extra = {"steady": steady[name].to_dict()} if name in steady else {}
        phases[name] = replace(
            stats,
            diagnostics=_diagnose(recs, stats.mode),
            harness=health.get(name),
            extra={**stats.extra, **phase_blocks(recs), **extra},
        )
    phases, server = attach_server(run, phases)
    codes = {d.get("code"): d for p in phases.values() for d in p.diagnostics or []}
    meta = redact_value({k: v for k, v in run.meta.items() if not k.startswith("_")})
    summary = Summary(
        run_id=run.meta.get("run_id") or run.path.name,
        label=run.meta.get("label"),
        generated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        percentile_method=PERCENTILE_METHOD,
        slo_ms=slo,
        slo=format_slo(slo),
        input=InputStats(
            records=len(run.records),
            measured_records=len(measured),
            warmup_records=sum(is_warmup(r) for r in run.records),
            corrupt_lines=len(run.corrupt_lines),
            corrupt_line_numbers=run.corrupt_lines[:50],
            run_json="missing or unreadable" if "_meta_error" in run.meta else "ok",
        ),
        phases=phases,
        comparison=comparison(phases),
        diagnostics=list(codes.values()),
        capacity=capacity_summary(run),
        run=meta,
        extra={"server_metrics": server} if server is not None else {},
    )
    spread = report_spread(phases) if repeats_of(run.meta) > 1 else []
    blocks: dict[str, Any] = {"repeats": spread} if spread else {}
    return replace(summary, trust=assess(summary), extra={**summary.extra, **blocks})
