"""``llmload report {build,compare,baseline,gate,history}``: read runs, gate CI."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from llmload.loadtests.slo import DEFAULT_SLO
from llmload.reports.gate.metrics import CHOICES

EXIT_BAD_INPUT = 2


def _percent(text: str) -> float:
    """``"10%"`` or ``"0.1"`` -> 0.1."""
    t = text.strip()
    return float(t[:-1]) / 100.0 if t.endswith("%") else float(t)


def cmd_build(args: argparse.Namespace) -> int:
    from llmload.reports.build import build_run
    from llmload.reports.page.terminal import render_terminal

    summary = build_run(args.run_dir, args.slo)
    print(render_terminal(summary))
    print(f"wrote {args.run_dir / 'summary.json'}, summary.md, report.html")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from llmload.reports.gate.fingerprint import differences_text
    from llmload.reports.page.two_runs import render_compare_html, render_compare_markdown
    from llmload.reports.summary.make import build_summary
    from llmload.reports.table.loader import load_run

    run_a, run_b = load_run(args.run_a), load_run(args.run_b)
    a, b = build_summary(run_a, args.slo), build_summary(run_b, args.slo)
    out = args.out or args.run_b
    out.mkdir(parents=True, exist_ok=True)
    diff = differences_text(run_a.meta, run_b.meta)
    md = render_compare_markdown(a, b, diff)
    (out / "compare.md").write_text(md, encoding="utf-8")
    html = render_compare_html(run_a, a, run_b, b, diff)
    (out / "compare.html").write_text(html, encoding="utf-8")
    print(md)
    print(f"wrote {out / 'compare.md'} and {out / 'compare.html'}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from llmload.reports.export.tables import ExportError, export_run

    try:
        counts = export_run(args.run_dir, args.format, args.out)
    except ExportError as exc:
        print(f"reports export: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    folder = counts.files[0].parent
    skipped = f"; {counts.corrupt_lines} corrupt lines skipped" if counts.corrupt_lines else ""
    print(
        f"exported {counts.requests} requests, {counts.events} content events, "
        f"{counts.scrapes} scraped values ({args.format}) -> {folder}{skipped}"
    )
    return 0


def cmd_baseline(args: argparse.Namespace) -> int:
    from llmload.reports.gate.baseline import write_baseline
    from llmload.reports.gate.history import append
    from llmload.reports.table.loader import load_run

    if (args.out is None) == (args.history is None):
        raise ValueError("give --out FILE (one baseline) or --history DIR (append to a history)")
    run = load_run(args.run_dir)
    if args.history is not None:
        if run.meta.get("status") not in (None, "completed"):
            raise ValueError(
                f"{run.name} did not complete (status {run.meta.get('status')}): a history "
                "keeps only runs that speak for their build"
            )
        path = append(run, args.history, args.label or "", args.commit or "")
        print(f"added {run.name} to the history {args.history} ({path.name})")
        return 0
    doc = write_baseline(run, args.out)
    sizes = ", ".join(
        f"{m}/{mode} n={v['n']}" for m, per in doc["metrics"].items() for mode, v in per.items()
    )
    print(f"wrote baseline {args.out} from {run.name}: {sizes}")
    return 0


def cmd_gate(args: argparse.Namespace) -> int:
    from llmload.reports.gate import github
    from llmload.reports.gate.baseline import read_baseline
    from llmload.reports.gate.capacity import evaluate_capacity
    from llmload.reports.gate.fingerprint import check_allowed
    from llmload.reports.gate.history import gate_baseline, gate_history, gate_paired
    from llmload.reports.gate.html import render_gate_html
    from llmload.reports.gate.report import render_junit, render_markdown, render_text, to_json
    from llmload.reports.gate.verdict import GateConfig
    from llmload.reports.table.loader import load_run

    if args.last < 2:
        raise ValueError(f"--last must be at least 2 (runs to estimate a spread), got {args.last}")
    if not 0 < args.percentile < 100:
        raise ValueError(f"--percentile must be between 0 and 100, got {args.percentile:g}")
    if not 0.5 <= args.confidence < 1:
        raise ValueError(f"--confidence must be in [0.5, 1), got {args.confidence:g}")
    if args.max_regression < 0:
        raise ValueError("--max-regression must not be negative")
    if args.metric is None:  # TTFT, or E2E where the run has no stream to time a token in
        args.metric = default_metric(args.run_dir)
    capacity = args.metric.strip().lower() == "capacity"
    if "capacity" in args.metric.lower() and not capacity:
        raise ValueError("--metric capacity gates two capacity searches: give it alone")
    if args.from_intended and capacity:
        raise ValueError("--from-intended must go with --metric ttft or e2e, not capacity")
    cfg = GateConfig(
        metric=args.metric,
        percentile=args.percentile,
        max_regression=args.max_regression,
        confidence=args.confidence,
        max_ttft_p95_ms=args.max_ttft_p95_ms,
        modes=args.mode or None,
        min_samples=args.min_samples,
        resamples=args.resamples,
        seed=args.seed,
        from_intended=args.from_intended,
        starved_share=args.starved_share,
        inconclusive=args.inconclusive,
        allow_difference=check_allowed(args.allow_difference or []),
    )
    if not capacity:
        cfg.specs()  # a bad --metric is bad input (exit 2) before any file is read
    if args.baseline is not None and args.history is not None:
        raise ValueError("give --baseline FILE or --history DIR, not both")
    if args.history is not None:
        if capacity:
            raise ValueError("--metric capacity needs --baseline FILE")
        result, _ = gate_history(load_run(args.run_dir), args.history, cfg, args.last)
    elif args.baseline is None:
        if capacity:
            raise ValueError("--metric capacity needs --baseline FILE")
        result = gate_paired(load_run(args.run_dir), cfg)
    else:
        baseline = read_baseline(args.baseline)
        run = load_run(args.run_dir)
        result = (evaluate_capacity if capacity else gate_baseline)(run, baseline, cfg)
    print(render_text(result))
    md = render_markdown(result)
    if args.summary_md:
        args.summary_md.write_text(md, encoding="utf-8")
    github.publish(result, md, os.environ, sys.stdout)
    junit = args.junit or args.run_dir / "junit.xml"
    junit.write_text(render_junit(result), encoding="utf-8")
    (args.html or args.run_dir / "gate.html").write_text(render_gate_html(result), "utf-8")
    (args.run_dir / "gate.json").write_text(to_json(result), encoding="utf-8")
    return result.exit_code


def cmd_history(args: argparse.Namespace) -> int:
    from llmload.reports.gate.trend import render_history, write_history

    md, html = render_history(args.history, args.metric, args.percentile, args.mode, args.seed)
    out = args.out or args.history
    write_history(out, md, html, os.environ)
    print(md)
    print(f"wrote {out / 'history.md'} and {out / 'history.html'}")
    return 0


def default_metric(run_dir: Path) -> str:
    """``--metric``'s default for a run: ``ttft``, or ``e2e`` when its protocol has no
    stream (embeddings, rerank: no token, so no TTFT)."""
    from llmload.loadtests.measure.adapters.base import streams

    try:
        protocol = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("protocol")
    except (OSError, ValueError, AttributeError):
        return "ttft"  # the gate itself says what is wrong with the run
    return "ttft" if not isinstance(protocol, str) or streams(protocol) else "e2e"


def add_gate_options(g: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The gate's options (``llmload ci-gate`` shows them too: it passes them on)."""
    g.add_argument(
        "--metric",
        default=None,
        metavar="LIST",
        help=f"what to gate, comma separated, each NAME[:pQ][:ALLOWED] with NAME one of "
        f"{', '.join(CHOICES)} — e.g. ttft:p95:10%%,itl,throughput:5%%,error-rate:1%% "
        "(throughput and goodput gate a drop; error-rate a rise in points); one verdict, "
        "Holm-Bonferroni over all checks (default ttft; e2e for a run without streams: "
        "embeddings, rerank); or capacity, alone: two "
        "`llmload capacity` searches",
    )
    g.add_argument(
        "--percentile", type=float, default=95.0, help="latency percentile compared (95)"
    )
    g.add_argument(
        "--max-regression",
        type=_percent,
        default=0.10,
        help="allowed change where --metric gives none, e.g. 10%% (the default) or 0.1",
    )
    g.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="one-sided confidence a regression must reach to fail, in [0.5, 1) (0.95)",
    )
    g.add_argument(
        "--max-ttft-p95-ms", type=float, default=None, help="absolute TTFT p95 limit, ms (none)"
    )
    g.add_argument(
        "--inconclusive",
        choices=("neutral", "pass", "fail"),
        default="neutral",
        help="exit code of an inconclusive verdict: neutral 2 (the default), pass 0, fail 1",
    )
    g.add_argument(
        "--mode",
        action="append",
        choices=("stream", "sync"),
        help="mode(s) to gate (default: stream when present, else all)",
    )
    g.add_argument(
        "--from-intended",
        action="store_true",
        help="open-loop runs: gate the latency from the intended send time (+ schedule delay)",
    )
    g.add_argument(
        "--starved-share",
        type=_percent,
        default=0.10,
        help="a failure is inconclusive (exit 2) when this share of a gated phase's harness "
        "samples was above the saturation line (default 10%%)",
    )
    g.add_argument(
        "--min-samples",
        type=int,
        default=None,
        help="samples needed on each side (default: max(30, 3 / (1 - percentile/100)))",
    )
    g.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (2000)")
    g.add_argument(
        "--seed", type=int, default=20240607, help="bootstrap seed: same inputs, same verdict"
    )
    g.add_argument(
        "--allow-difference",
        action="append",
        metavar="KEY",
        help="accept this difference between the run and the baseline (e.g. max_tokens; "
        "repeatable); otherwise one that can move the metrics makes the gate inconclusive",
    )
    g.add_argument("--junit", type=Path, default=None, help="JUnit XML path (RUN_DIR/junit.xml)")
    g.add_argument("--html", type=Path, default=None, help="gate page path (RUN_DIR/gate.html)")
    g.add_argument("--summary-md", type=Path, default=None, help="also write the Markdown here")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmload report", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    slo_help = f"goodput SLOs, e.g. {DEFAULT_SLO} (the default)"

    b = sub.add_parser("build", help="write summary.json, summary.md, report.html into RUN_DIR")
    b.add_argument("run_dir", type=Path, help="a run directory (run.json + requests.jsonl)")
    b.add_argument("--slo", default=None, help=slo_help)
    b.set_defaults(func=cmd_build)

    c = sub.add_parser("compare", help="two runs side by side (Markdown + HTML)")
    c.add_argument("run_a", type=Path, help="the run before (A)")
    c.add_argument("run_b", type=Path, help="the run after (B)")
    c.add_argument("--out", type=Path, default=None, help="folder for compare.md/html (RUN_B)")
    c.add_argument("--slo", default=None, help=slo_help)
    c.set_defaults(func=cmd_compare)

    x = sub.add_parser(
        "export", help="RUN_DIR as tables: requests, content events, scrapes (Parquet or CSV)"
    )
    x.add_argument("run_dir", type=Path, help="a run directory")
    x.add_argument(
        "--format",
        default="parquet",
        choices=("parquet", "csv"),
        help="parquet (needs the parquet extra: pyarrow) or csv (parquet)",
    )
    x.add_argument("--out", type=Path, default=None, help="folder for the tables (RUN_DIR/export)")
    x.set_defaults(func=cmd_export)

    bl = sub.add_parser("baseline", help="store what the gate needs of RUN_DIR's distribution")
    bl.add_argument("run_dir", type=Path, help="a good run to compare later runs against")
    bl.add_argument("--out", type=Path, default=None, help="baseline file to write (JSON)")
    bl.add_argument(
        "--history",
        type=Path,
        default=None,
        metavar="DIR",
        help="append the run to this history (a folder CI keeps as an artifact or cache); "
        "`report gate --history DIR` then judges runs against the spread between its runs",
    )
    bl.add_argument("--label", default=None, help="the run's name on the history's axis")
    bl.add_argument("--commit", default=None, help="the build it measured (e.g. $GITHUB_SHA)")
    bl.set_defaults(func=cmd_baseline)

    h = sub.add_parser(
        "history", help="a history's gated metrics run by run, and where they shifted"
    )
    h.add_argument("history", type=Path, help="a folder `report baseline --history` appends to")
    h.add_argument(
        "--metric",
        default=None,
        metavar="LIST",
        help="as `report gate --metric` (ttft; e2e for a history of runs without streams)",
    )
    h.add_argument("--percentile", type=float, default=95.0, help="latency percentile (95)")
    h.add_argument(
        "--mode",
        default=None,
        choices=("stream", "sync"),
        help="(stream; sync for a history of runs without streams)",
    )
    h.add_argument("--out", type=Path, default=None, help="folder for history.md/.html (DIR)")
    h.add_argument("--seed", type=int, default=0, help="the permutation test's seed")
    h.set_defaults(func=cmd_history)

    g = sub.add_parser(
        "gate",
        help="exit 0 pass, 1 regression or limit breach, 2 inconclusive (too few samples, "
        "too noisy, a starved load generator or a lost worker)",
    )
    g.add_argument("run_dir", type=Path, help="the run directory to gate")
    g.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="baseline file (`report baseline` writes it); without it, a run made with "
        "--baseline-target compares its target's phases with the baseline target's",
    )
    g.add_argument(
        "--history",
        type=Path,
        default=None,
        metavar="DIR",
        help="judge the run against the last --last comparable runs of this history "
        "(`report baseline --history`): the spread between runs is part of the verdict",
    )
    g.add_argument("--last", type=int, default=10, help="comparable runs of --history to read (10)")
    add_gate_options(g)
    g.set_defaults(func=cmd_gate)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    from llmload.reports.gate.baseline import BaselineError
    from llmload.reports.table.loader import RunError

    try:
        return int(args.func(args))
    except (RunError, BaselineError, ValueError) as exc:
        print(f"reports {args.cmd}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
