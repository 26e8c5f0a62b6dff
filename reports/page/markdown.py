"""Render a summary as Markdown (``summary.md``)."""

from __future__ import annotations

from llmload.reports.capacity.view import capacity_markdown
from llmload.reports.draw.fmt import fmt_ms, table
from llmload.reports.page.rows import (
    INTENDED,
    PHASE_HEADER,
    PHASE_NOTE,
    diag_hint,
    harness_lines,
    open_loop_phases,
    phase_rows,
    sync_vs_stream_rows,
)
from llmload.reports.server.gpu import gpu_lines
from llmload.reports.server.view import server_lines
from llmload.reports.summary.repeats import spread_lines
from llmload.reports.table.answers import answer_lines
from llmload.reports.table.pooled import pooled_lines
from llmload.reports.table.schema import Summary
from llmload.reports.table.steady import steady_lines
from llmload.reports.workloads.view import workloads_markdown

TRUST_ICON = {"green": "🟢", "amber": "🟠", "red": "🔴", "n/a": "⚪"}


def trust_markdown(summary: Summary) -> str:
    """The short form of the trust box: overall level, then one line per check."""
    trust = summary.trust
    if not trust:
        return ""
    lines = [f"**Can I trust these numbers?** {TRUST_ICON[trust['level']]} {trust['level']}", ""]
    lines += [
        f"- {TRUST_ICON[i['level']]} {i['check']}: {i['reason']}"
        for i in trust["items"]
        if i["level"] != "n/a"
    ]
    return "\n".join(lines)


def render_markdown(summary: Summary) -> str:
    """``summary.md``: the sync-vs-stream table first, then per phase and per scenario detail."""
    run = summary.run
    out = [f"# llmload run `{summary.run_id}`" + (f" — {summary.label}" if summary.label else "")]
    facts = [
        ("target", run.get("target")),
        ("model", run.get("model")),
        ("protocol", run.get("protocol")),
        ("later turns (Responses API)", run.get("responses_chain")),
        ("status", run.get("status")),
        ("SLO (goodput)", summary.slo),
    ]
    out.append("\n".join(f"- **{k}**: `{v}`" for k, v in facts if v))
    trust = trust_markdown(summary)
    if trust:
        out.append(trust)
    capacity = capacity_markdown(summary)
    if capacity:
        out.append(capacity)
    rows = sync_vs_stream_rows(summary)
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
    prow = phase_rows(summary)
    out.append("## Phases and scenarios")
    out.append(table(PHASE_HEADER, prow) if prow else "_No measured requests._")
    if prow:
        out.append(PHASE_NOTE)
    out += [s for s in (workloads_markdown(summary),) if s]
    out += _extras(summary)
    return "\n\n".join(out) + "\n"


def _extras(summary: Summary) -> list[str]:
    out: list[str] = []
    for name, g in summary.phases.items():
        if g.ttft_by_turn_ms is not None:
            rows = [
                [t, str(d.n), fmt_ms(d.p50), fmt_ms(d.p95)] for t, d in g.ttft_by_turn_ms.items()
            ]
            out.append(f"### TTFT per turn — {name}\n\n" + table(["turn", "n", "p50", "p95"], rows))
        if g.ttft_by_images_ms is not None:
            rows = [
                [k, str(d.n), fmt_ms(d.p50), fmt_ms(d.p95)] for k, d in g.ttft_by_images_ms.items()
            ]
            head = ["images", "n", "p50", "p95"]
            out.append(f"### TTFT by images per request — {name}\n\n" + table(head, rows))
    open_loop = open_loop_phases(summary)
    if open_loop:
        out.append(
            "## From the intended send time (open loop)\n\n"
            "Latency counted from when the schedule meant to send each request, so a load "
            "generator that fell behind cannot hide server slowness (coordinated omission). "
            "Gate on it with `python -m llmload.reports gate --from-intended`."
        )
    for name, g in open_loop:
        rows = [
            [label, fmt_ms(d.p50), fmt_ms(d.p95), fmt_ms(d.p99)]
            for label, d in ((label, g.dist(k)) for label, k in INTENDED)
        ]
        out.append(f"### {name}\n\n" + table(["ms", "p50", "p95", "p99"], rows))
    inp = summary.input
    quality = [
        f"- records: {inp.records} ({inp.warmup_records} warm-up, left out of statistics)",
        f"- corrupt lines skipped in requests.jsonl: {inp.corrupt_lines}"
        + (
            f" (line {inp.cut_line} was cut short: the run stopped mid-write)"
            if inp.cut_line
            else ""
        ),
    ]
    if inp.run_json != "ok":
        quality.append("- run.json: missing or unreadable (phase times taken from the records)")
    quality += [f"- {line}" for line in harness_lines(summary)]
    quality += [f"- {line}" for line in steady_lines(summary.phases)]
    repeats = spread_lines(summary.extra.get("repeats") or [])
    quality += [f"- between-run spread: {line}" for line in repeats]
    bundled = summary.run.get("bundled_server") or {}
    if bundled.get("speed_tokens_per_s"):
        line = (
            f"- bundled server ({bundled.get('engine')}): {bundled['speed_tokens_per_s']:,.0f} "
            f"output tokens/s measured before the run at {bundled.get('probe_streams')} streams"
        )
        if bundled.get("planned_tokens_per_s"):
            line += (
                f"; the plan asked up to {bundled['planned_tokens_per_s']:,.0f} tokens/s "
                f"({bundled['planned_share']:.0%} of it"
                + (
                    ": more than it can serve, so latencies include its queue)"
                    if bundled["planned_share"] > 1
                    else ")"
                )
            )
        quality.append(line)
    fit = summary.run.get("context_fit") or {}
    if fit.get("skipped") or fit.get("trimmed"):
        quality.append(
            f"- target context length {fit['context_limit']} tokens: {fit['skipped']} of "
            f"{fit['checked']} prompts skipped (no room for an answer), {fit['trimmed']} sent "
            f"with max_tokens trimmed to fit (prompt tokens by {fit['prompt_tokens']})"
        )
    for name, g in summary.phases.items():
        if g.token_count_mismatch is not None:
            m = g.token_count_mismatch
            quality.append(
                f"- {name}: server usage vs client token count differ in "
                f"{m['mismatched']}/{m['compared']} requests ({m['rate']:.1%})"
            )
        if g.multi_token_events is not None:
            n = g.multi_token_events
            quality.append(
                f"- {name}: in {n['requests']}/{n['compared']} responses some events carried "
                "several tokens (server usage > content events) — expected, not a fault: the "
                "client counts events without --tokenizer, and a server may hold back a "
                "partial character; pass --tokenizer to compare token counts"
            )
        if "client_minus_server_ttft_ms" in g.dists:
            d = g.dists["client_minus_server_ttft_ms"]
            quality.append(
                f"- {name}: client − server TTFT p50 {fmt_ms(d.p50)} ms, "
                f"p95 {fmt_ms(d.p95)} ms (network + proxy + client)"
            )
    quality += [f"- {line}" for line in pooled_lines(summary)]
    quality += [f"- {line}" for line in answer_lines(summary)]
    out.append("## Data quality\n\n" + "\n".join(quality))
    server = server_lines(summary)
    if server:
        out.append(
            "## The server's side\n\nFrom its `/metrics` on the records' clock "
            "(`server_metrics.jsonl`; histogram figures are bucket-exact in report.html).\n\n"
            + "\n".join(f"- {line}" for line in server)
        )
    gpus = gpu_lines(summary.phases)
    if gpus:
        out.append(
            "## The GPUs\n\nFrom their exporter on the records' clock (`gpu_metrics.jsonl`; "
            "energy from the energy counter, else power integrated, as each line says).\n\n"
            + "\n".join(
                f"- {line}" if not line.startswith("  ") else f"  - {line.strip()}" for line in gpus
            )
        )
    out.append(f"Percentiles: {summary.percentile_method}.")
    diags = summary.diagnostics
    if diags:
        lines = [f"- **`{d.get('code')}`** — {diag_hint(d)}" for d in diags]
        out.append("## Diagnostics\n\n" + "\n".join(lines))
    return out
