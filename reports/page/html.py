"""``report.html``: one self-contained page (inline CSS and SVG, no script, no network)."""

from __future__ import annotations

import json
import shlex
import time
from html import escape
from typing import Any

import numpy as np

from llmload.reports.capacity.view import capacity_html
from llmload.reports.draw.charts import Axes, Band, Series, render
from llmload.reports.draw.fmt import fmt_ms, fmt_rate
from llmload.reports.draw.htmltable import table as _table
from llmload.reports.page.rows import (
    PHASE_HEADER,
    PHASE_NOTE,
    diag_hint,
    phase_rows,
    sync_vs_stream_rows,
)
from llmload.reports.server.gpu import series as gpu_series
from llmload.reports.server.view import server_html
from llmload.reports.table import timeseries as ts
from llmload.reports.table.answers import answer_lines
from llmload.reports.table.loader import Run
from llmload.reports.table.pooled import pooled_lines
from llmload.reports.table.schema import MetricStats, Summary
from llmload.reports.table.steady import steady_lines
from llmload.reports.workloads.view import workloads_html

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;
max-width:1240px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.muted,.note{color:#777;font-size:12px}
.cards{display:flex;flex-wrap:wrap;gap:8px;margin:14px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:6px 10px;flex:1 1 0}
.card b{display:block;font-size:18px;white-space:nowrap}.card span{color:#666;font-size:12px}
tr.total td{font-weight:600;background:#fafafa}
.card.wide{flex-grow:2}.card.bad{border-color:#d62728}.card.bad b{color:#d62728}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f6f6}
#phases-table{overflow-x:auto}#phases-table table{font-size:12.5px}
#phases-table td{white-space:nowrap;padding:3px 6px}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:12px}
figure.chart{margin:0;border:1px solid #eee;border-radius:6px;padding:6px}
figcaption{font-weight:600;margin-bottom:2px}
svg{width:100%;height:auto;font-size:11px}svg text{fill:#444}
.grid{stroke:#eee}.frame{fill:none;stroke:#bbb}.axis{fill:#333;font-size:12px}
.bandlabel{fill:#999;font-size:10px}
.legend{font-size:12px;display:flex;flex-wrap:wrap;gap:4px 12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
.bar{background:#d62728;height:10px;display:inline-block}
.diag{border-left:4px solid #ff7f0e;background:#fff7ec;padding:6px 10px;margin:6px 0}
pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}
details{margin:4px 0}summary{cursor:pointer;font-weight:600}
.trust{border:2px solid #bbb;border-radius:6px;padding:8px 12px;margin:12px 0}
.trust h2{border:0;margin:0 0 6px;font-size:16px}.trust table{margin:0}
.trust td:first-child{white-space:nowrap}
.trust.green{border-color:#2ca02c}.trust.amber{border-color:#ff7f0e}.trust.red{border-color:#d62728}
.lv{font-weight:600;white-space:nowrap}.lv.green{color:#2ca02c}.lv.amber{color:#e07000}
.lv.red{color:#d62728}.lv.na{color:#999}
"""


def _p50_p95(d: MetricStats) -> str:
    return f"{fmt_ms(d.p50)} / {fmt_ms(d.p95)} ms"


def _trust(summary: Summary) -> str:
    """The "can I trust these numbers" box: one row per check, green/amber/red with the reason."""
    trust = summary.trust
    if not trust:
        return ""
    level = trust["level"]
    rows = "".join(
        f'<tr><td>{escape(i["check"])}</td><td class="lv {i["level"].replace("/", "")}">'
        f"{escape(i['level'])}</td><td>{escape(i['reason'])}</td></tr>"
        for i in trust["items"]
    )
    return (
        f'<div class="trust {level.replace("/", "")}" id="trust">'
        f'<h2>Can I trust these numbers? <span class="lv {level.replace("/", "")}">'
        f"{escape(level)}</span></h2><table>{rows}</table></div>"
    )


def _harness(summary: Summary) -> str:
    """Per phase and process: the load generator's CPU and event-loop lag."""
    rows = []
    for name, g in summary.phases.items():
        h = g.harness or {}
        for proc, p in (h.get("processes") or {}).items():
            if not p.get("samples"):
                continue
            rows.append(
                [
                    name,
                    proc,
                    str(p["samples"]),
                    f"{p['cpu_p50']:.0f}%",
                    f"{p['cpu_max']:.0f}%",
                    f"{p['lag_p99_ms']:.1f}",
                    f"{p['lag_max_ms']:.1f}",
                    f"{p['saturated_share']:.0%}",
                ]
            )
    if not rows:
        return ""
    header = [
        "phase",
        "process",
        "samples",
        "CPU p50",
        "CPU max",
        "loop lag p99 (ms)",
        "loop lag max (ms)",
        "above the line",
    ]
    line = next(g.harness["line"] for g in summary.phases.values() if g.harness)
    return (
        '<div id="harness-table">'
        + _table(header, rows)
        + f'<p class="note">One sample a second per load-generator process. A sample is above '
        f"the line at CPU ≥ {line['cpu_percent']:g}% of one core or an event loop "
        f"{line['loop_lag_ms']:g} ms late or more: requests measured then carry the client's "
        "own delay. The master of a distributed run only forwards records.</p></div>"
    )


def _cards(summary: Summary) -> str:
    """Headline numbers: TTFT (and TTST) p50/p95 per mode, tokens/s, errors, goodput."""
    cards: list[tuple[str, str, str]] = []  # value, label, css class
    phases = summary.phases
    first = {m: next((p for p in phases.values() if p.mode == m), None) for m in MODES}
    for mode, g in first.items():
        if g is None or mode == "mixed":
            continue
        cards.append((_p50_p95(g.dist("ttft_ms")), f"TTFT p50 / p95 · {mode}", ""))
        if mode == "stream" and g.dist("ttst_ms").n:
            cards.append((_p50_p95(g.dist("ttst_ms")), "TTST p50 / p95 · stream", ""))
        if (g.extra.get("answers") or {}).get("reasoning"):
            cards.append((_p50_p95(g.dist("ttfo_ms")), f"TTFO p50 / p95 · {mode}", ""))
        if "ttft_from_intended_ms" in g.dists:
            label = f"TTFT from intended send p50 / p95 · {mode}"
            cards.append((_p50_p95(g.dists["ttft_from_intended_ms"]), label, ""))
    comp = summary.sync_vs_stream
    imp = comp.scenarios["all"].improvement_pct("ttft_ms", "p50") if comp else None
    if imp is not None:
        cards.append((f"{imp:.0f}%", "TTFT p50 cut by streaming", ""))
    g = first["stream"] or first["sync"]
    if g:
        cards.append((fmt_rate(g.output_tokens_per_s), f"output tokens/s · {g.mode}", ""))
    total = sum(p.count for p in phases.values())
    errs = sum(p.count - p.ok for p in phases.values())
    cards.append((f"{errs} / {total}", "errors / requests", "bad" if errs else ""))
    rates = {}
    for mode in ("stream", "sync", "mixed"):
        group = [p for p in phases.values() if p.mode == mode]
        if group:
            rates[mode] = sum(p.slo_met for p in group) / sum(p.count for p in group)
    value = " / ".join(f"{v:.0%}" for v in rates.values()) or "–"
    slo = summary.slo.replace(",", ", ")
    cards.append((value, f"met SLO · {' / '.join(rates)} ({slo})", "wide"))
    corrupt = summary.input.corrupt_lines
    if corrupt:
        cards.append((str(corrupt), "corrupt lines skipped", "bad"))
    html = "".join(
        f'<div class="card {cls}"><b>{escape(v)}</b><span>{escape(k)}</span></div>'
        for v, k, cls in cards
    )
    return f'<div class="cards">{html}</div>'


MODES = ("sync", "stream", "mixed")


def _gpu_charts(run: Run, t0: float, bands: list[Band]) -> list[Axes]:
    """The GPU exporter's power and utilization on the client charts' axis (none: no exporter)."""
    if run.gpu is None:
        return []
    power, util = gpu_series(run.gpu, t0)
    out = []
    if power:
        out.append(
            Axes(
                "GPU power over time",
                "seconds since start",
                "W",
                "chart-gpu-power",
                power,
                bands,
                note="From the GPU exporter (gpu_metrics.jsonl), per scrape.",
            )
        )
    if util:
        out.append(
            Axes(
                "GPU utilization over time",
                "seconds since start",
                "%",
                "chart-gpu-util",
                util,
                bands,
            )
        )
    return out


def _charts(run: Run) -> str:
    recs = run.measured if len(run.measured) else run.records
    t0 = ts.origin(run.records, run.meta)
    bands = ts.phase_bands(run.meta, t0)
    tps, inflight = ts.throughput_and_inflight(run.records, t0)
    ok = recs.where(recs.ok())
    # one array of gaps at a time (a long run has tens of millions): scaled, binned, freed
    itl_dist = ts.distribution(ok.itl(copy=True), "per event", scale=1000, inplace=True)
    if ok.per_token_is_itl():  # one token per event: the same histogram
        token_dist = Series("per token", list(itl_dist.points), "step")
    else:
        token_dist = ts.distribution(ok.per_token_gaps(), "per token", scale=1000, inplace=True)
    token_dist.dashed = True
    cdfs = ts.ttft_cdfs(recs)
    xs = [x for s in cdfs for x, _ in s.points]
    wide = bool(xs) and min(xs) > 0 and max(xs) / min(xs) > 10
    charts = [
        Axes(
            "TTFT distribution (CDF) per mode and scenario",
            "TTFT (ms, log scale)" if wide else "TTFT (ms)",
            "fraction ≤ x",
            "chart-ttft-cdf",
            cdfs,
            x_log=wide,
            note="Sync dashed (its TTFT is the whole response), streaming solid.",
        ),
        Axes(
            "Latency over time (phases shaded)",
            "seconds since start",
            "ms",
            "chart-latency-time",
            ts.latency_over_time(run.records, t0),
            bands,
        ),
        Axes(
            "Output tokens/s over time",
            "seconds since start",
            "tokens/s",
            "chart-throughput",
            [tps],
            bands,
        ),
        Axes(
            "Requests in flight over time",
            "seconds since start",
            "requests",
            "chart-inflight",
            [inflight],
            bands,
        ),
        *_gpu_charts(run, t0, bands),
        Axes(
            "Inter-token latency distribution",
            "ms",
            "gaps",
            "chart-itl",
            [s for s in (itl_dist, token_dist) if s.points],
            note="Per event: gaps between content events. Per token (dashed): each gap divided "
            "by the tokens its event carried; the two coincide when every event carries one.",
        ),
        Axes(
            "Errors over time (by class)",
            "seconds since start",
            "errors per bin",
            "chart-errors-time",
            ts.errors_over_time(run.records, t0),
            bands,
            note="" if not run.records.ok().all() else "No errors in this run.",
        ),
    ]
    gap = (ok.num("ttft_s") - ok.num("server_ttft_s"))[ok.is_("mode", "stream")]
    timed = gap[~np.isnan(gap)] * 1000
    if len(timed):
        charts.append(
            Axes(
                "Client minus server TTFT",
                "ms (network, proxy, client)",
                "requests",
                "chart-client-server",
                [ts.distribution(timed, "client − server")],
                y_zero=True,
            )
        )
    return '<div class="grid2">' + "".join(render(c) for c in charts) + "</div>"


DETAIL_ROWS = (
    ("time to first output token (TTFO)", "ttfo_ms"),
    ("time to second token", "ttst_ms"),
    ("ITL per token", "itl_per_token_ms"),
    ("time to headers", "headers_ms"),
    ("schedule delay (open loop)", "schedule_delay_ms"),
    ("TTFT from intended send time", "ttft_from_intended_ms"),
    ("E2E from intended send time", "e2e_from_intended_ms"),
    ("server TTFT (target's own)", "server_ttft_ms"),
    ("client − server TTFT", "client_minus_server_ttft_ms"),
)


def _stats_row(label: str, d: MetricStats) -> list[str]:
    return [label, str(d.n), fmt_ms(d.p50), fmt_ms(d.p95), fmt_ms(d.p99)]


def _details(summary: Summary) -> str:
    """Per phase: the secondary distributions, TTFT per turn and by images, token-count
    agreement."""
    out = []
    for name, g in summary.phases.items():
        rows = [_stats_row(label, g.dist(k)) for label, k in DETAIL_ROWS if g.dist(k).n]
        rows += [_stats_row(f"TTFT, turn {t}", d) for t, d in (g.ttft_by_turn_ms or {}).items()]
        rows += [
            _stats_row(f"TTFT, {k} image{'s' * (k != '1')}", d)
            for k, d in (g.ttft_by_images_ms or {}).items()
        ]
        if rows:
            out.append(f"<h3>{escape(name)}</h3>" + _table(["ms", "n", "p50", "p95", "p99"], rows))
        m = g.token_count_mismatch
        if m:
            out.append(
                f"<p>Token counts ({escape(name)}): server usage vs client count differ in "
                f"{m['mismatched']} of "
                f"{m['compared']} requests ({m['rate']:.1%}).</p>"
            )
        n = g.multi_token_events
        if n:
            out.append(
                f"<p>Token counts ({escape(name)}): in {n['requests']} of {n['compared']} "
                "responses some events carried several tokens (server usage &gt; content "
                "events). Expected, not a fault: without <code>--tokenizer</code> the client "
                "counts events, and a server may hold back a partial character.</p>"
            )
    return "".join(out)


def _errors(summary: Summary) -> str:
    totals: dict[str, int] = {}
    for p in summary.phases.values():
        for cls, n in p.errors.items():
            totals[cls] = totals.get(cls, 0) + n
    if not totals:
        return "<p>No failed requests.</p>"
    top = max(totals.values())
    rows = "".join(
        f"<tr><td>{escape(c)}</td><td>{n}</td><td>"
        f'<span class="bar" style="width:{200 * n / top:.0f}px"></span></td></tr>'
        for c, n in sorted(totals.items(), key=lambda kv: -kv[1])
    )
    return (
        f'<table id="errors-table"><tr><th>class</th><th>requests</th><th></th></tr>{rows}</table>'
    )


def _show(key: str, value: Any) -> str:
    """Metadata values for people: UTC times, command lines joined."""
    if key.endswith("_at") and isinstance(value, int | float):
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))
    if isinstance(value, list):
        return shlex.join(str(v) for v in value)
    return str(value)


def _metadata(summary: Summary) -> str:
    run = summary.run
    keys: tuple[str, ...] = ("target", "model", "protocol", "responses_chain", "label")
    keys += ("status", "started_at", "ended_at", "command")
    rows = [[k, _show(k, run[k])] for k in keys if run.get(k) is not None]
    rows.append(["SLO", summary.slo])
    rows.append(["percentiles", summary.percentile_method])
    # folded: the settings are there when wanted, not a long scroll at the end of every report
    blocks = "".join(
        f"<details><summary>{escape(k)}</summary>"
        f"<pre>{escape(json.dumps(run[k], indent=2, sort_keys=True))}</pre></details>"
        for k in ("config", "workload", "phases", "versions", "host")
        if run.get(k)
    )
    return _table([], rows) + blocks


def render_html(run: Run, summary: Summary) -> str:
    """The whole report page."""
    title = f"llmload run {summary.run_id}"
    parts = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="muted">{escape(str(summary.run.get("target") or ""))} · '
        f"{escape(str(summary.run.get('model') or ''))} · "
        f"generated {summary.generated_at}</p>",
        _trust(summary),
        _cards(summary),
        capacity_html(summary),
    ]
    for d in summary.diagnostics:
        parts.append(
            f'<div class="diag"><b>{escape(str(d.get("code")))}</b> — {escape(diag_hint(d))}</div>'
        )
    rows = sync_vs_stream_rows(summary)
    if rows:
        parts.append("<h2>Sync vs streaming (p50, ms)</h2>")
        parts.append(
            _table(
                ["request type", "sync", "streaming", "improvement", "requests sync / stream"], rows
            )
        )
    parts.append(
        '<h2>Phases and scenarios</h2><div id="phases-table">'
        + _table(PHASE_HEADER, phase_rows(summary))
        + f'<p class="note">{escape(PHASE_NOTE.replace("`", ""))}</p></div>'
    )
    parts.append(workloads_html(summary))
    parts.append("<h2>Charts</h2>" + _charts(run))
    parts.append(server_html(run, summary))
    details = _details(summary)
    if details:
        parts.append("<h2>Details</h2>" + details)
    harness = _harness(summary)
    if harness:
        parts.append("<h2>Harness health</h2>" + harness)
    parts.append("<h2>Errors</h2>" + _errors(summary))
    inp = summary.input
    parts.append(
        f"<h2>Data</h2><p>{inp.records} records, {inp.warmup_records} warm-up "
        f"(left out of statistics), {inp.corrupt_lines} corrupt lines skipped.</p>"
        + "".join(f'<p class="answers">{escape(line)}.</p>' for line in pooled_lines(summary))
        + "".join(f'<p class="answers">{escape(line)}.</p>' for line in answer_lines(summary))
        + "".join(f'<p class="steady">{escape(s)}</p>' for s in steady_lines(summary.phases))
    )
    repeats = summary.extra.get("repeats") or []
    if repeats:
        rows = [
            [r["target"], r["mode"], r["metric"]]
            + [", ".join("–" if v is None else f"{v:.4g}" for v in r["phases"].values())]
            + ["–" if r["spread_pct"] is None else f"{r['spread_pct']:.1f}%"]
            for r in repeats
        ]
        header = ["target", "mode", "metric", "each repeat", "spread (% of median)"]
        parts.append(
            '<h2>Between-run spread</h2><div id="repeats-table">' + _table(header, rows) + "</div>"
        )
    parts.append("<h2>Run metadata</h2>" + _metadata(summary))
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>\n"
    )
