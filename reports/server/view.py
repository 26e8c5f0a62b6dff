"""``report.html``'s "The server's side": per phase, the server's numbers beside the client's,
where TTFT went, and the server's gauges over time on the client charts' x-axis."""

from __future__ import annotations

from html import escape
from typing import Any

import numpy as np

from llmload.loadtests import serverfamilies
from llmload.reports.draw.charts import Axes, Band, Series, render
from llmload.reports.draw.fmt import fmt_ms
from llmload.reports.server.phase import family_for, gauge
from llmload.reports.table import timeseries as ts
from llmload.reports.table.arraystats import exact_sum
from llmload.reports.table.loader import Run
from llmload.reports.table.schema import MetricStats, Summary
from llmload.reports.table.scrapes import ServerRun

EXACTNESS = (
    "Server quantiles come from its histograms: the true value lies in the bucket shown "
    "(lo–hi ms) and the number is interpolated inside it, as Prometheus's histogram_quantile "
    "does; the wider the server's bucket grid, the rougher the number. Means are exact (sum / "
    "count). Client numbers are exact percentiles of its records."
)
#: (label, the server's latency role, the client's distribution)
ROWS = (
    ("TTFT", "ttft", "ttft_ms"),
    ("queue", "queue", None),
    ("prefill", "prefill", None),
    ("decode", "decode", None),
    ("ITL", "itl", "itl_ms"),
    ("TPOT", "tpot", "tpot_ms"),
    ("E2E", "e2e", "e2e_ms"),
)


def _q(q: dict[str, Any] | None) -> str:
    if not q:
        return "–"
    hi = "∞" if q["hi"] is None else fmt_ms(q["hi"])
    return f"{fmt_ms(q['value'])} ({fmt_ms(q['lo'])}–{hi})"


def _client(d: MetricStats) -> list[str]:
    return [fmt_ms(d.mean), fmt_ms(d.p50), fmt_ms(d.p95)] if d.n else ["–", "–", "–"]


def _table(header: list[str], rows: list[list[str]], css: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{css}"><tr>{head}</tr>{body}</table>'


def _split_and_state(block: dict[str, Any]) -> tuple[str, list[str], list[str]]:
    """The phase's mean TTFT (or TTFO) split in parts, and the server's state in words."""
    split = block.get("ttft_split_ms") or {}
    parts = [
        ("client", split.get("client")),
        ("server", split.get("server")),
        ("queue", split.get("queue")),
        ("prefill", split.get("prefill")),
        ("decode", split.get("decode")),
        ("rest of the server's", split.get("server_other")),
        ("path (client − server)", split.get("path")),
    ]
    split_row = [f"{k} {fmt_ms(v)}" for k, v in parts if v is not None]
    g = block.get("gauges") or {}
    state = []
    for role, label in (("running", "running"), ("waiting", "waiting")):
        if role in g:
            extra = f", p95 {g[role]['p95']:.0f}" if "p95" in g[role] else ""
            state.append(f"{label} mean {g[role]['mean']:.1f}{extra}, max {g[role]['max']:.0f}")
    if "kv_usage" in g:
        state.append(f"KV cache mean {g['kv_usage']['mean']:.0%}, max {g['kv_usage']['max']:.0%}")
    hit = block.get("prefix_cache_hit_rate")
    if hit is None and "prefix_hit_rate" in g:
        hit = g["prefix_hit_rate"]["mean"]
    if hit is not None:
        state.append(f"prefix-cache hit rate {hit:.0%}")
    pre = (block.get("counters") or {}).get("preemptions")
    if pre is not None:
        state.append(f"preemptions {pre:.0f}")
    return split.get("basis", "ttft").upper(), split_row, state


def _phase(name: str, block: dict[str, Any], client: Any) -> str:
    rows = []
    for label, role, dist in ROWS:
        lat = block["latency"].get(role)
        if lat is None:
            continue
        side = _client(client.dist(dist)) if dist else ["", "", ""]
        rows.append(
            [label, *side, fmt_ms(lat["mean"]), _q(lat["p50"]), _q(lat["p95"]), f"{lat['n']:.0f}"]
        )
    header = ["ms", "client mean", "client p50", "client p95"]
    header += ["server mean", "server p50 (bucket)", "server p95 (bucket)", "server n"]
    basis, split_row, state = _split_and_state(block)
    window = "" if block["window"]["exact"] else " (nearest scrapes: the window spills over)"
    return (
        f"<h3>{escape(name)}</h3>"
        + _table(header, rows)
        + f"<p>Mean {escape(basis)} split, ms: "
        + escape(" · ".join(split_row))
        + "</p>"
        + (f"<p>{escape('; '.join(state))}. {block['scrapes']} scrapes{window}.</p>")
    )


def _over_time(run: Run, sr: ServerRun, server: serverfamilies.Server) -> str:
    t0 = ts.origin(run.records, run.meta)
    bands = ts.phase_bands(run.meta, t0)
    t = run.records
    ended = t.num("started_at") + np.nan_to_num(t.num("e2e_s"), nan=0.0) - t0
    end = max([b.x1 for b in bands] + ([float(ended.max())] if len(ended) else []))
    scrapes = [s for s in sr.scrapes if 0.0 <= s.t - t0 <= end]
    have = sr.names()
    charts = [
        _gauges(server, scrapes, t0, have, ("running", "waiting"), 1.0, bands, "requests"),
        _gauges(server, scrapes, t0, have, ("kv_usage", "prefix_hit_rate"), 100.0, bands, "%"),
        _means(run, server, scrapes, t0, have, bands),
    ]
    pre = family_for(server, "preemptions", have)
    if pre is not None:
        pts = [(s.t - t0, s.sample.values[pre]) for s in scrapes if pre in s.sample.values]
        if pts:
            base = pts[0][1]
            series = [Series("preemptions since the start", [(x, y - base) for x, y in pts])]
            charts.append(
                Axes(
                    "Server: preemptions",
                    "seconds since start",
                    "requests",
                    "chart-server-preemptions",
                    series,
                    bands,
                )
            )
    return '<div class="grid2">' + "".join(render(c) for c in charts if c is not None) + "</div>"


def _gauges(
    server: serverfamilies.Server,
    scrapes: list[Any],
    t0: float,
    have: set[str],
    roles: tuple[str, ...],
    scale: float,
    bands: list[Band],
    unit: str,
) -> Axes | None:
    series = []
    for role in roles:
        name = family_for(server, role, have)
        if name is None:
            continue
        pts = [(s.t - t0, gauge(s, name, role) * scale) for s in scrapes if name in s.sample.values]
        series.append(Series(role.replace("_", " "), pts, "step"))
    if not series:
        return None
    title = "Server: " + " and ".join(s.name for s in series)
    return Axes(title, "seconds since start", unit, f"chart-server-{roles[0]}", series, bands)


def _means(
    run: Run,
    server: serverfamilies.Server,
    scrapes: list[Any],
    t0: float,
    have: set[str],
    bands: list[Band],
) -> Axes | None:
    """Mean per scrape interval: the server's queue time and TTFT, and the client's TTFT of
    the requests that got their first token in that interval."""
    series = []
    for role in ("queue", "ttft"):
        name = family_for(server, role, have)
        if name is None:
            continue
        pts = []
        for a, b in zip(scrapes, scrapes[1:], strict=False):
            ha, hb = a.sample.histograms.get(name), b.sample.histograms.get(name)
            if hb is None:
                continue
            n = hb.count - (ha.count if ha else 0.0)
            if n > 0:
                pts.append((b.t - t0, (hb.sum - (ha.sum if ha else 0.0)) / n * 1000))
        series.append(Series(f"server {role}", pts, "line"))
    if not series:
        return None
    m = run.measured
    ttft = m.num("ttft_s")
    timed = m.ok() & m.is_("mode", "stream") & ~np.isnan(ttft)
    firsts = m.num("started_at")[timed] + ttft[timed] - t0  # when each first token came
    order = np.argsort(firsts, kind="stable")
    firsts, values = firsts[order], ttft[timed][order] * 1000
    client = []
    for a, b in zip(scrapes, scrapes[1:], strict=False):
        lo, hi = np.searchsorted(firsts, [a.t - t0, b.t - t0], side="right")
        if hi > lo:
            client.append((b.t - t0, exact_sum(values[lo:hi]) / int(hi - lo)))
    if client:
        series.append(Series("client TTFT", client, "line", dashed=True))
    return Axes(
        "Server queue time and TTFT, mean per scrape interval",
        "seconds since start",
        "ms",
        "chart-server-latency",
        series,
        bands,
        note="Each point: the requests the server finished since the previous scrape "
        "(client: those whose first token arrived then).",
    )


def server_html(run: Run, summary: Summary) -> str:
    """The section, or '' when the run has no server metrics file (an older run, or off)."""
    block = summary.extra.get("server_metrics")
    if not block:
        return ""
    head = '<h2 id="server-side">The server\'s side</h2>'
    url = escape(str(block.get("url") or ""))
    if block.get("status") == "absent":
        why = escape(str(block.get("reason") or ""))
        return (
            head
            + f"<p>No server metrics: {url} — {why}. The report shows the client's side only.</p>"
        )
    if not block.get("server"):
        seen = ", ".join(block.get("families") or []) or "none"
        return head + (
            f"<p>{url} holds no family llmload knows (vLLM, SGLang, TGI, the bundled server), "
            f"so latency cannot be split into queue, prefill and path. Families kept: "
            f"{escape(seen)}.</p>"
        )
    name = str(block["name"])
    roles = block.get("roles") or {}
    unseen = [r for r, f in roles.items() if f is None]
    parts = [
        head,
        f"<p>{escape(name[:1].upper() + name[1:])}'s own metrics from {url}, every "
        f"{block.get('interval_s')} s: "
        f"{block['scrapes']} scrapes, {block['failed']} failed"
        + (f" (last: {escape(str(block.get('last_error')))})" if block["failed"] else "")
        + ".</p>",
    ]
    if unseen:
        parts.append(
            f'<p class="note">Not in {escape(name)}\'s metrics: {escape(", ".join(unseen))}.</p>'
        )
    for phase, stats in summary.phases.items():
        sb = stats.extra.get("server")
        if sb:
            parts.append(_phase(phase, sb, stats))
    parts.append(f'<p class="note">{escape(EXACTNESS)}</p>')
    sr = run.server
    server = serverfamilies.BY_KEY.get(str(block["server"]))
    if sr is not None and server is not None and run.records:
        parts.append(_over_time(run, sr, server))
    return '<div id="server-section">' + "".join(parts) + "</div>"


def server_lines(summary: Summary) -> list[str]:
    """Per phase with a server block, in words for summary.md and the terminal: the server's
    TTFT and queue, the mean split of the client's TTFT, and its running/waiting requests."""
    lines = []
    for name, g in summary.phases.items():
        block = g.extra.get("server")
        if not block:
            continue
        lat = block.get("latency") or {}
        seen = [
            f"{label} mean {fmt_ms(lat[role]['mean'])} ms"
            for label, role in (("TTFT", "ttft"), ("queue", "queue"))
            if role in lat
        ]
        basis, split_row, state = _split_and_state(block)
        text = f"{name}: {block.get('server', 'server')} " + ", ".join(seen)
        if split_row:
            text += f"; mean {basis} split, ms: " + " · ".join(split_row)
        if state:
            text += "; " + "; ".join(state)
        lines.append(text)
    return lines
