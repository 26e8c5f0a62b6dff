"""Render a summary as Markdown (``summary.md``) and as the runner's end-of-run terminal text."""

from __future__ import annotations

from typing import Any

from reports.capacity_view import capacity_markdown, capacity_terminal
from reports.fmt import fmt_ms, fmt_pct, fmt_rate, table
from reports.trust import harness_text

__all__ = ["fmt_ms", "fmt_pct", "fmt_rate", "table"]  # also imported from here

DIAGNOSTIC_HINTS = {
    "proxy_buffering": (
        "Streamed tokens arrived all at once at the end of the response: a proxy in front of "
        "the server is buffering the stream (nginx: `proxy_buffering off;` or send "
        "`X-Accel-Buffering: no`)."
    ),
}


def comparison_rows(summary: dict[str, Any]) -> list[list[str]]:
    """The seeds' table: scenario, sync first/total, stream first/total, improvement."""
    comp = summary.get("comparison")
    if not comp:
        return []
    rows = []
    for name, c in comp["scenarios"].items():
        rows.append(
            [
                name,
                f"first {fmt_ms(c['sync_ttft_ms_p50'])} / total {fmt_ms(c['sync_e2e_ms_p50'])}",
                f"first {fmt_ms(c['stream_ttft_ms_p50'])} / total {fmt_ms(c['stream_e2e_ms_p50'])}",
                f"first {fmt_pct(c['ttft_ms_p50_improvement_pct'])}, "
                f"total {fmt_pct(c['e2e_ms_p50_improvement_pct'])}",
                f"{c['sync_count']} / {c['stream_count']}",
            ]
        )
    return rows


def _pair(d: dict[str, Any] | None) -> str:
    """``p50 / p95`` of one distribution, ``– / –`` when it has no values."""
    if not d or not d.get("n"):
        return "– / –"
    return f"{fmt_ms(d['p50'])} / {fmt_ms(d['p95'])}"


def ttst_pair(g: dict[str, Any]) -> str:
    """TTST p50 / p95 of a streaming group; ``–`` for sync (its first byte is the whole body)."""
    return _pair(g.get("ttst_ms")) if g["mode"] != "sync" else "–"


def phase_row(name: str, g: dict[str, Any]) -> list[str]:
    """One row of the phases table (``PHASE_HEADER``)."""
    errors = ", ".join(f"{k} {v}" for k, v in g["errors"].items()) or "0"
    t = g["ttft_ms"]
    return [
        name,
        g["mode"],
        str(g["count"]),
        errors,
        f"{fmt_ms(t['p50'])} / {fmt_ms(t['p95'])} / {fmt_ms(t['p99'])}",
        ttst_pair(g),
        _pair(g["itl_ms"]),
        _pair(g.get("itl_per_token_ms")),
        fmt_ms(g["tpot_ms"]["p50"]),
        _pair(g["e2e_ms"]),
        fmt_rate(g["output_tokens_per_s"]),
        fmt_rate(g["requests_per_s"]),
        fmt_rate(g["goodput_per_s"]),
    ]


PHASE_HEADER = [
    "phase / scenario",
    "mode",
    "requests",
    "errors",
    "TTFT p50 / p95 / p99 (ms)",
    "TTST p50 / p95 (ms)",
    "ITL per event p50 / p95 (ms)",
    "ITL per token p50 / p95 (ms)",
    "TPOT p50 (ms)",
    "E2E p50 / p95 (ms)",
    "out tok/s",
    "req/s",
    "goodput/s",
]


PHASE_NOTE = (
    "TTST: time to the second token (second content event) — how soon the stream keeps "
    "going after the first; `–` for sync, whose first byte is the whole answer. "
    "ITL per token: each gap between events divided by the tokens the event carried "
    "(equal to per event when every event carries one token)."
)


INTENDED = (
    ("TTFT from the intended send time", "ttft_from_intended_ms"),
    ("TTFT from the actual send (as measured)", "ttft_ms"),
    ("E2E from the intended send time", "e2e_from_intended_ms"),
    ("schedule delay (intended → actual send)", "schedule_delay_ms"),
)


TRUST_ICON = {"green": "🟢", "amber": "🟠", "red": "🔴", "n/a": "⚪"}


def trust_markdown(summary: dict[str, Any]) -> str:
    """The short form of the trust box: overall level, then one line per check."""
    trust = summary.get("trust")
    if not trust:
        return ""
    lines = [f"**Can I trust these numbers?** {TRUST_ICON[trust['level']]} {trust['level']}", ""]
    lines += [
        f"- {TRUST_ICON[i['level']]} {i['check']}: {i['reason']}"
        for i in trust["items"]
        if i["level"] != "n/a"
    ]
    return "\n".join(lines)


def harness_lines(summary: dict[str, Any]) -> list[str]:
    """Per phase: the load generator's own CPU and loop lag (``reports.trust``)."""
    return [
        f"{name}: load generator {harness_text(g['harness'])}"
        for name, g in summary["phases"].items()
        if g.get("harness")
    ]


def render_markdown(summary: dict[str, Any]) -> str:
    """``summary.md``: the comparison table first, then per phase and per scenario detail."""
    run = summary.get("run", {})
    out = [
        f"# llmload run `{summary['run_id']}`"
        + (f" — {summary['label']}" if summary.get("label") else "")
    ]
    facts = [
        ("target", run.get("target")),
        ("model", run.get("model")),
        ("protocol", run.get("protocol")),
        ("status", run.get("status")),
        ("SLO (goodput)", summary["slo"]),
    ]
    out.append("\n".join(f"- **{k}**: `{v}`" for k, v in facts if v))
    trust = trust_markdown(summary)
    if trust:
        out.append(trust)
    capacity = capacity_markdown(summary)
    if capacity:
        out.append(capacity)
    rows = comparison_rows(summary)
    if rows:
        out.append("## Sync vs streaming\n\nMedian (p50) of successful requests, milliseconds.")
        out.append(
            table(
                [
                    "request type",
                    "sync (ms)",
                    "streaming (ms)",
                    "improvement",
                    "requests sync / stream",
                ],
                rows,
            )
        )
    prow = []
    for name, g in summary["phases"].items():
        prow.append(phase_row(f"**{name}**", g))
        if len(g["scenarios"]) > 1:
            prow += [phase_row(f"{name} / {s}", sg) for s, sg in g["scenarios"].items()]
    out.append("## Phases and scenarios")
    out.append(table(PHASE_HEADER, prow) if prow else "_No measured requests._")
    if prow:
        out.append(PHASE_NOTE)
    out += _extras(summary)
    return "\n\n".join(out) + "\n"


def _extras(summary: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for name, g in summary["phases"].items():
        if "ttft_by_turn_ms" in g:
            rows = [
                [t, str(d["n"]), fmt_ms(d["p50"]), fmt_ms(d["p95"])]
                for t, d in g["ttft_by_turn_ms"].items()
            ]
            out.append(f"### TTFT per turn — {name}\n\n" + table(["turn", "n", "p50", "p95"], rows))
    open_loop = [(n, g) for n, g in summary["phases"].items() if "ttft_from_intended_ms" in g]
    if open_loop:
        out.append(
            "## From the intended send time (open loop)\n\n"
            "Latency counted from when the schedule meant to send each request, so a load "
            "generator that fell behind cannot hide server slowness (coordinated omission). "
            "Gate on it with `python -m reports gate --from-intended`."
        )
    for name, g in open_loop:
        rows = [
            [label, fmt_ms(g[k]["p50"]), fmt_ms(g[k]["p95"]), fmt_ms(g[k]["p99"])]
            for label, k in INTENDED
        ]
        out.append(f"### {name}\n\n" + table(["ms", "p50", "p95", "p99"], rows))
    inp = summary["input"]
    quality = [
        f"- records: {inp['records']} ({inp['warmup_records']} warm-up, left out of statistics)",
        f"- corrupt lines skipped in requests.jsonl: {inp['corrupt_lines']}",
    ]
    if inp.get("run_json") != "ok":
        quality.append("- run.json: missing or unreadable (phase times taken from the records)")
    quality += [f"- {line}" for line in harness_lines(summary)]
    for name, g in summary["phases"].items():
        if "token_count_mismatch" in g:
            m = g["token_count_mismatch"]
            quality.append(
                f"- {name}: server usage vs client token count differ in "
                f"{m['mismatched']}/{m['compared']} requests ({m['rate']:.1%})"
            )
        if "multi_token_events" in g:
            m = g["multi_token_events"]
            quality.append(
                f"- {name}: in {m['requests']}/{m['compared']} responses some events carried "
                "several tokens (server usage > content events) — expected, not a fault: the "
                "client counts events without --tokenizer, and a server may hold back a "
                "partial character; pass --tokenizer to compare token counts"
            )
        if "client_minus_server_ttft_ms" in g:
            d = g["client_minus_server_ttft_ms"]
            quality.append(
                f"- {name}: client − server TTFT p50 {fmt_ms(d['p50'])} ms, "
                f"p95 {fmt_ms(d['p95'])} ms (network + proxy + client)"
            )
    out.append("## Data quality\n\n" + "\n".join(quality))
    out.append(f"Percentiles: {summary['percentile_method']}.")
    diags = summary.get("diagnostics") or []
    if diags:
        lines = [f"- **`{d.get('code')}`** — {diag_hint(d)}" for d in diags]
        out.append("## Diagnostics\n\n" + "\n".join(lines))
    return out


def diag_hint(d: dict[str, Any]) -> str:
    """What a diagnostic found and what to do, in plain language (its own words, else ours)."""
    hint = d.get("hint") or DIAGNOSTIC_HINTS.get(str(d.get("code")), "")
    return " ".join(str(t).strip() for t in (d.get("message"), hint) if t)


def render_terminal(summary: dict[str, Any]) -> str:
    """A compact plain-text summary the runner prints at the end of a run."""
    lines = [f"llmload run {summary['run_id']}"]
    trust = summary.get("trust")
    if trust:
        lines.append(f"trust: {trust['level'].upper()}")
        lines += [
            f"  {i['level']}: {i['check']}: {i['reason']}"
            for i in trust["items"]
            if i["level"] in ("amber", "red")
        ]
    lines += capacity_terminal(summary)
    rows = comparison_rows(summary)
    if rows:
        lines.append("sync vs streaming (p50 ms):")
        width = max(len(r[0]) for r in rows)
        for r in rows:
            lines.append(f"  {r[0]:<{width}}  sync {r[1]:<28} stream {r[2]:<28} {r[3]}")
    header = (
        f"  {'phase':<10} {'mode':<6} {'reqs':>6} {'err':>5} {'TTFT p50':>9} {'p95':>7} "
        f"{'TTST p50':>9} {'p95':>7} {'ITL p50':>8} {'E2E p50':>8} {'tok/s':>8} "
        f"{'goodput/s':>9}"
    )
    lines += ["per phase (ms; TTST is time to second token):", header]
    for name, g in summary["phases"].items():
        errs = g["count"] - g["ok"]
        tt = g.get("ttst_ms") or {}
        sync = g["mode"] == "sync"
        lines.append(
            f"  {name:<10} {g['mode']:<6} {g['count']:>6} {errs:>5} "
            f"{fmt_ms(g['ttft_ms']['p50']):>9} {fmt_ms(g['ttft_ms']['p95']):>7} "
            f"{'–' if sync else fmt_ms(tt.get('p50')):>9} "
            f"{'–' if sync else fmt_ms(tt.get('p95')):>7} "
            f"{fmt_ms(g['itl_ms']['p50']):>8} {fmt_ms(g['e2e_ms']['p50']):>8} "
            f"{fmt_rate(g['output_tokens_per_s']):>8} {fmt_rate(g['goodput_per_s']):>9}"
        )
    open_loop = [(n, g) for n, g in summary["phases"].items() if "ttft_from_intended_ms" in g]
    if open_loop:
        lines.append("from the intended send time (open loop, ms):")
    for name, g in open_loop:
        d, e = g["ttft_from_intended_ms"], g["e2e_from_intended_ms"]
        lines.append(
            f"  {name:<10} TTFT p50 {fmt_ms(d['p50'])} p95 {fmt_ms(d['p95'])}   "
            f"E2E p50 {fmt_ms(e['p50'])} p95 {fmt_ms(e['p95'])}   "
            f"schedule delay p95 {fmt_ms(g['schedule_delay_ms']['p95'])}"
        )
    harness = harness_lines(summary)
    if harness:
        lines.append("harness health (the load generator itself):")
        lines += [f"  {line}" for line in harness]
    inp = summary["input"]
    if not summary["phases"]:
        lines.append(f"  no measured requests ({inp['warmup_records']} warm-up records only)")
    if inp["corrupt_lines"]:
        lines.append(f"  ! {inp['corrupt_lines']} corrupt lines in requests.jsonl were skipped")
    for d in summary.get("diagnostics") or []:
        lines.append(f"  ! {d.get('code')}: {diag_hint(d)}")
    return "\n".join(lines)
