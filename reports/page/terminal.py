"""The compact end-of-run text the runner prints (``render_terminal``)."""

from __future__ import annotations

from llmload.reports.capacity.view import capacity_terminal
from llmload.reports.draw.fmt import fmt_ms, fmt_rate
from llmload.reports.page.rows import (
    diag_hint,
    harness_lines,
    open_loop_phases,
    sync_vs_stream_rows,
)
from llmload.reports.server.gpu import gpu_lines
from llmload.reports.server.view import server_lines
from llmload.reports.summary.repeats import spread_lines
from llmload.reports.table.answers import answer_lines
from llmload.reports.table.pooled import pooled_lines
from llmload.reports.table.schema import Summary
from llmload.reports.table.steady import steady_lines
from llmload.reports.workloads.view import workloads_terminal


def render_terminal(summary: Summary) -> str:
    """A compact plain-text summary the runner prints at the end of a run."""
    lines = [f"llmload run {summary.run_id}"]
    trust = summary.trust
    if trust:
        lines.append(f"trust: {trust['level'].upper()}")
        lines += [
            f"  {i['level']}: {i['check']}: {i['reason']}"
            for i in trust["items"]
            if i["level"] in ("amber", "red")
        ]
    lines += capacity_terminal(summary)
    rows = sync_vs_stream_rows(summary)
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
    for name, g in summary.phases.items():
        errs = g.count - g.ok
        tt, ttft = g.dist("ttst_ms"), g.dist("ttft_ms")
        sync = g.mode == "sync"
        lines.append(
            f"  {name:<10} {g.mode:<6} {g.count:>6} {errs:>5} "
            f"{fmt_ms(ttft.p50):>9} {fmt_ms(ttft.p95):>7} "
            f"{'–' if sync else fmt_ms(tt.p50):>9} "
            f"{'–' if sync else fmt_ms(tt.p95):>7} "
            f"{fmt_ms(g.dist('itl_ms').p50):>8} {fmt_ms(g.dist('e2e_ms').p50):>8} "
            f"{fmt_rate(g.output_tokens_per_s):>8} {fmt_rate(g.goodput_per_s):>9}"
        )
    open_loop = open_loop_phases(summary)
    if open_loop:
        lines.append("from the intended send time (open loop, ms):")
    for name, g in open_loop:
        d, e = g.dist("ttft_from_intended_ms"), g.dist("e2e_from_intended_ms")
        lines.append(
            f"  {name:<10} TTFT p50 {fmt_ms(d.p50)} p95 {fmt_ms(d.p95)}   "
            f"E2E p50 {fmt_ms(e.p50)} p95 {fmt_ms(e.p95)}   "
            f"schedule delay p95 {fmt_ms(g.dist('schedule_delay_ms').p95)}"
        )
    pooled = pooled_lines(summary)
    if pooled:
        lines.append("without streams (embeddings, rerank):")
        lines += [f"  {line}" for line in pooled]
    answers = answer_lines(summary)
    if answers:
        lines.append("answers (reasoning, tool calls, no visible output):")
        lines += [f"  {line}" for line in answers]
    by_images = [(n, g) for n, g in summary.phases.items() if g.ttft_by_images_ms]
    if by_images:
        lines.append("TTFT by images per request (ms, p50 / p95, n):")
    for name, g in by_images:
        parts = [
            f"{k}: {fmt_ms(d.p50)} / {fmt_ms(d.p95)} ({d.n})"
            for k, d in (g.ttft_by_images_ms or {}).items()
        ]
        lines.append(f"  {name:<10} " + " · ".join(parts))
    lines += workloads_terminal(summary)
    gpus = gpu_lines(summary.phases)
    if gpus:
        lines.append("the GPUs (their exporter, on the records' clock):")
        lines += [f"  {line}" for line in gpus]
    server = server_lines(summary)
    if server:
        lines.append("the server's side (its /metrics, on the records' clock):")
        lines += [f"  {line}" for line in server]
    repeats = spread_lines(summary.extra.get("repeats") or [])
    if repeats:
        lines.append("between-run spread (--repeat):")
        lines += [f"  {line}" for line in repeats]
    steady = steady_lines(summary.phases)
    if steady:
        lines.append("steady state (MSER-5):")
        lines += [f"  {line}" for line in steady]
    harness = harness_lines(summary)
    if harness:
        lines.append("harness health (the load generator itself):")
        lines += [f"  {line}" for line in harness]
    inp = summary.input
    if not summary.phases:
        lines.append(f"  no measured requests ({inp.warmup_records} warm-up records only)")
    if inp.cut_line is not None:
        lines.append(
            f"  ! requests.jsonl ends with a cut line ({inp.cut_line}: the run stopped "
            f"mid-write); every whole line before it was read ({inp.records} records)"
        )
    if inp.corrupt_lines - (inp.cut_line is not None):
        lines.append(
            f"  ! {inp.corrupt_lines - (inp.cut_line is not None)} corrupt lines in "
            "requests.jsonl were skipped"
        )
    for diag in summary.diagnostics:
        lines.append(f"  ! {diag.get('code')}: {diag_hint(diag)}")
    return "\n".join(lines)
