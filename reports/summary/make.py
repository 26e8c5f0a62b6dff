"""Build the typed summary (``reports.table.schema.Summary``; ``to_json()`` is ``summary.json``):
per phase and per scenario statistics, sync vs stream, diagnostics, harness health, trust."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from llmload.loadtests.measure.record import ERROR_CLASSES, RequestRecord
from llmload.loadtests.redact import redact_value
from llmload.loadtests.slo import format_slo, parse_slo
from llmload.reports.capacity.curve import capacity_summary
from llmload.reports.server.attach import attach as attach_server
from llmload.reports.server.attach import attach_gpu
from llmload.reports.summary.repeats import repeats_of, report_spread
from llmload.reports.table import diagnostics
from llmload.reports.table.answers import answer_stats
from llmload.reports.table.arraystats import stats_of
from llmload.reports.table.columns import RecordTable
from llmload.reports.table.loader import Run
from llmload.reports.table.pooled import pooled_stats
from llmload.reports.table.schema import (
    InputStats,
    PhaseStats,
    Summary,
    SyncVsStream,
    SyncVsStreamRow,
)
from llmload.reports.table.stats import PERCENTILE_METHOD
from llmload.reports.table.steady import steady_states
from llmload.reports.table.trust import assess, phase_health
from llmload.reports.workloads.measure import phase_blocks

MS = 1000.0


def meets_slo(records: Sequence[RequestRecord], slo: dict[str, float]) -> np.ndarray:
    """Mask: the ok requests that met every configured SLO (TPOT only when the request has
    one; an embeddings or rerank request, which has no token, on E2E alone), read from the
    records' columns (``reports.table.columns``; record objects are made a table)."""
    t = RecordTable.of(records)
    good = t.ok()
    pooled = ~np.isnan(t.num("inputs"))  # no stream, no token: TTFT and TPOT do not apply
    for name, limit_ms in slo.items():
        column = {"ttft": "ttft_s", "e2e": "e2e_s", "tpot": "tpot_s"}.get(name)
        if column is None:  # an SLO on nothing a record has: nothing meets it
            return np.zeros(len(t), dtype=bool)
        value = t.num(column)
        within = value * MS <= limit_ms  # (NaN, no value: not within)
        if name == "tpot":
            within |= np.isnan(value)
        elif name == "ttft":
            within |= np.isnan(value) & pooled
        good &= within
    return good


def _span_s(t: RecordTable) -> float:
    """Wall time covered by the records (first start to last end) when no phase times exist."""
    start = t.num("started_at")
    end = start + np.nan_to_num(t.num("e2e_s"), nan=0.0)
    return max(float(end.max()) - float(start.min()), 1e-9)


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

    The records are read as columns (``reports.table.columns``; a list is made a table):
    every distribution is exact, from numpy arrays instead of lists of floats.
    """
    t = RecordTable.of(records)
    n = len(t)
    ok = t.ok()
    n_ok = int(ok.sum())
    statuses = t.label_values("status")
    failed = np.bincount(t.codes("status")[~ok], minlength=len(statuses))
    errors = Counter({statuses[c]: int(k) for c, k in enumerate(failed.tolist()) if k})
    modes = sorted(t.distinct("mode"))
    num = t.num
    ttft, tpot, e2e = num("ttft_s")[ok], num("tpot_s")[ok], num("e2e_s")[ok]
    # the run's largest arrays (every gap): one copy each, scaled and sorted where it is
    itl = stats_of(t.itl(ok, copy=True), MS, inplace=True)
    if t.per_token_is_itl(ok):
        per_token = itl
    else:
        per_token = stats_of(t.per_token_gaps(ok), MS, inplace=True)
    dists = {
        "ttft_ms": stats_of(ttft, MS),
        "itl_ms": itl,
        "tpot_ms": stats_of(tpot, MS),
        "e2e_ms": stats_of(e2e, MS),
        "itl_per_token_ms": per_token,
        "ttst_ms": stats_of(num("ttst_s")[ok], MS),
        "headers_ms": stats_of(num("headers_s")[ok], MS),
        "output_tokens": stats_of(num("output_tokens")[ok]),
        "decode_tokens_per_s": stats_of(1.0 / tpot[(tpot != 0) & ~np.isnan(tpot)]),
    }
    delay = num("schedule_delay_s")[ok]
    delayed = ~np.isnan(delay)
    if delayed.any():
        d = delay[delayed]
        dists["schedule_delay_ms"] = stats_of(d, MS)
        dists["ttft_from_intended_ms"] = stats_of(ttft[delayed] + d, MS)
        dists["e2e_from_intended_ms"] = stats_of(e2e[delayed] + d, MS)
    server_ttft = num("server_ttft_s")[ok]
    timed = t.is_("mode", "stream")[ok] & ~np.isnan(ttft) & ~np.isnan(server_ttft)
    if timed.any():
        dists["client_minus_server_ttft_ms"] = stats_of(ttft[timed] - server_ttft[timed], MS)
        dists["server_ttft_ms"] = stats_of(server_ttft[timed], MS)
        dists["server_queue_ms"] = stats_of(num("server_queue_s")[ok][timed], MS)
    shapes, answers = answer_stats(t.where(ok))
    pooled = pooled_stats(t.where(ok), duration_s)
    dists.update(shapes)
    for key, attr in (("send_ms", "send_s"), ("connect_ms", "connect_s")):
        seen = num(attr)
        if not np.isnan(seen).all():
            dists[key] = stats_of(seen, MS)
    turn = num("turn")[ok]
    turns = sorted({int(x) for x in np.unique(turn[~np.isnan(turn)]).tolist()})
    by_turn = {str(k): stats_of(ttft[turn == k], MS) for k in turns} if len(turns) > 1 else None
    images = num("images")[ok]
    counts = sorted({int(x) for x in np.unique(images[~np.isnan(images)]).tolist()})
    by_images = {str(k): stats_of(ttft[images == k], MS) for k in counts} if any(counts) else None
    multi: dict[str, int] | None = None
    mismatch: dict[str, float] | None = None
    usage, client = num("usage_output_tokens"), num("client_output_tokens")
    # a tool call's usage counts the call's markup, which the client never sees as text; an
    # answer with no visible output is counted on its own (``reports.table.answers``)
    both = ~np.isnan(usage) & ~np.isnan(client) & (num("tool_calls") == 0) & ~t.flag("no_output")
    compared = int(both.sum())
    if compared and client_counts_events:
        more = int((usage[both] != client[both]).sum())
        if more:
            multi = {"compared": compared, "requests": more}
    elif compared:
        bad = int((usage[both] != client[both]).sum())
        mismatch = {"compared": compared, "mismatched": bad, "rate": bad / compared}
    tokens = num("output_tokens")
    total_tokens = int(np.nansum(tokens)) if n else 0
    good = int(meets_slo(t, slo).sum())
    return PhaseStats(
        mode=modes[0] if len(modes) == 1 else "mixed",
        count=n,
        ok=n_ok,
        errors={c: errors[c] for c in (*ERROR_CLASSES, *sorted(errors)) if errors.get(c)},
        error_rate=(n - n_ok) / n if n else 0.0,
        duration_s=duration_s,
        dists=dists,
        output_tokens_total=total_tokens,
        output_tokens_per_s=total_tokens / duration_s,
        requests_per_s=n / duration_s,
        goodput_per_s=good / duration_s,
        slo_met=good,
        slo_met_rate=good / n if n else 0.0,
        ttft_by_turn_ms=by_turn,
        ttft_by_images_ms=by_images,
        multi_token_events=multi,
        token_count_mismatch=mismatch,
        extra={k: v for k, v in (("answers", answers), ("pooled", pooled)) if v},
    )


def phase_with_scenarios(
    records: Sequence[RequestRecord],
    duration_s: float,
    slo: dict[str, float],
    client_counts_events: bool = False,
) -> PhaseStats:
    """``phase_stats`` of a phase's records with each scenario's (the live web UI shows these)."""
    t = RecordTable.of(records)
    stats = phase_stats(t, duration_s, slo, client_counts_events)
    names = t.distinct("scenario")
    if len(names) == 1:  # one scenario (a dataset, a single prompt file): the same statistics
        return replace(stats, scenarios={names[0]: stats})
    scenarios = {
        scen: phase_stats(t.where(t.is_("scenario", scen)), duration_s, slo, client_counts_events)
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


def _ordered_phases(meta: dict[str, Any], records: RecordTable) -> list[str]:
    names = [ph.get("name") for ph in meta.get("phases") or [] if isinstance(ph, dict)]
    names += records.distinct("phase")
    return list(dict.fromkeys(n for n in names if n and n != "warmup"))


def sync_vs_stream(phases: dict[str, PhaseStats]) -> SyncVsStream | None:
    """Sync vs stream per scenario (p50, p95 and mean TTFT/total, improvement %) when both exist."""
    sync = next((p for p in phases.values() if p.mode == "sync"), None)
    stream = next((p for p in phases.values() if p.mode == "stream"), None)
    if sync is None or stream is None:
        return None
    a, b = sync.scenarios or {}, stream.scenarios or {}
    pairs = [("all", sync, stream)] + [(name, a[name], b[name]) for name in a if name in b]
    return SyncVsStream({name: SyncVsStreamRow.of(x, y) for name, x, y in pairs})


def _diagnose(records: RecordTable, mode: str) -> list[dict[str, Any]]:
    """The protocol diagnostics of one phase (``reports.table.diagnostics.detect``), as dicts."""
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
        recs = measured.where(measured.is_("phase", name))
        if not len(recs):
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
    phases, gpu = attach_gpu(run, phases)
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
            warmup_records=int(run.records.warmup().sum()),
            corrupt_lines=len(run.corrupt_lines),
            corrupt_line_numbers=run.corrupt_lines[:50],
            run_json="missing or unreadable" if "_meta_error" in run.meta else "ok",
            cut_line=run.cut_line,
        ),
        phases=phases,
        sync_vs_stream=sync_vs_stream(phases),
        diagnostics=list(codes.values()),
        capacity=capacity_summary(run),
        run=meta,
        extra={
            **({"server_metrics": server} if server is not None else {}),
            **({"gpu_metrics": gpu} if gpu is not None else {}),
        },
    )
    spread = report_spread(phases) if repeats_of(run.meta) > 1 else []
    blocks: dict[str, Any] = {"repeats": spread} if spread else {}
    return replace(summary, trust=assess(summary), extra={**summary.extra, **blocks})
