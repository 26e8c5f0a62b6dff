"""``llmload {run,loadtest,worker}``: the command line (``llmload.run`` runs it).

Every ``run`` option may also come from a TOML plan (``--plan FILE``); flags
given here override it (see ``loadtests.options``).  ``loadtest`` is ``run`` plus
the bundled server when ``--target`` is empty (what ``make loadtest`` calls).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from llmload.loadtests.options import (
    ARRIVALS,
    FIRST_STARTS,
    HTTP_CLIENTS,
    RunOptions,
    build_options,
    load_plan,
)


def _add_run_options(p: argparse.ArgumentParser) -> None:
    S = argparse.SUPPRESS
    g = p.add_argument_group("target")
    g.add_argument("--plan", metavar="FILE", help="TOML test plan; flags override it")
    g.add_argument("--target", help="base URL, path prefix kept (e.g. https://host/llm)")
    g.add_argument("--model", help="model name (default: first of the target's /v1/models)")
    g.add_argument("--protocol", help="openai-chat (default), openai-completions, gradio, tgi")
    g.add_argument("--api-name", help="--protocol gradio: the fn's endpoint (default: the app's)")
    g.add_argument("--api-key-env", metavar="VAR", help="send $VAR as 'Authorization: Bearer'")
    g.add_argument("--header", action="append", metavar="K:V", help="extra header (repeatable)")
    g.add_argument("--ca-bundle", metavar="PEM", help="CA bundle for TLS verification")
    g.add_argument("--insecure", action="store_true", default=S, help="skip TLS verification")
    g.add_argument(
        "--http-client",
        choices=HTTP_CLIENTS,
        help="lean: one socket per user, read directly (default); httpx: the general client",
    )
    g = p.add_argument_group("load shape")
    g.add_argument("--users", type=int, help="closed loop users (open loop: concurrency cap); 20")
    g.add_argument(
        "--max-concurrency",
        type=int,
        metavar="N",
        help="vLLM/guidellm name for --users; without --rate/--pacing: back-to-back requests",
    )
    g.add_argument("--spawn-rate", type=float, help="users started per second (20)")
    g.add_argument("--pacing", help="start-to-start interval per user, 0s = back-to-back (3s)")
    g.add_argument("--duration", help="length of each measured phase (60s)")
    g.add_argument(
        "--num-prompts",
        type=int,
        metavar="N",
        help="end each measured phase after N requests (then --duration, if given, bounds it)",
    )
    g.add_argument(
        "--rate",
        "--request-rate",
        dest="rate",
        type=float,
        help="open loop: requests per second (all users); --request-rate is the vLLM name",
    )
    g.add_argument("--arrival", choices=ARRIVALS, help="open-loop arrivals (poisson)")
    g.add_argument(
        "--first-start",
        choices=FIRST_STARTS,
        help="closed loop: each user's first request at a seeded random point of one --pacing "
        "interval (back to back: of the second its spawn batch fills) (spread, default), or "
        "all together as spawned (lock-step bursts)",
    )
    g.add_argument("--shape", help="steps:start=5,step=5,every=30s | spike:base=10,peak=100,...")
    g.add_argument("--modes", help="phases to run, in order: sync,stream (default)")
    g.add_argument("--warmup", help="warm-up phase length (recorded, excluded from stats)")
    g.add_argument("--cooldown", help="pause between measured phases")
    g.add_argument("--seed", type=int, help="seed for prompt choice and arrivals (0)")
    g = p.add_argument_group("workload")
    g.add_argument("--scenario", help="mix (default), short_qa, code_gen, long_summary, a:5,b:1")
    g.add_argument(
        "--dataset",
        metavar="FILE|random",
        help="JSONL prompts (messages or prompt), ShareGPT JSON, or 'random' (exact lengths)",
    )
    g.add_argument("--input-len", type=int, help="--dataset random: prompt tokens (1024)")
    g.add_argument(
        "--output-len", type=int, help="--dataset random/ShareGPT: output tokens (random: 128)"
    )
    g.add_argument(
        "--range-ratio", type=float, help="--dataset random: lengths uniform in len*(1+-r) (0)"
    )
    g.add_argument("--max-tokens", type=int, help="override every prompt's max_tokens")
    g.add_argument("--turns", type=int, help="turns per conversation (1)")
    g.add_argument("--temperature", type=float, help="sampling temperature sent")
    g.add_argument("--ignore-eos", action="store_true", default=S, help="ask for max_tokens")
    g.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="the target's tokenizer: counts output tokens, builds random/ShareGPT lengths",
    )
    g = p.add_argument_group("failures")
    g.add_argument("--request-timeout", help="whole-request limit -> 'timeout' (300s)")
    g.add_argument("--stall-timeout", help="streaming: no bytes this long -> 'stall' (60s)")
    g = p.add_argument_group("output")
    g.add_argument("--out", metavar="DIR", help="run directory (runs/<UTC>-<label>/)")
    g.add_argument("--label", help="run label")
    g.add_argument(
        "--no-report",
        dest="report",
        action="store_false",
        default=S,
        help="skip summary.json, summary.md and report.html at the end (`report build` later)",
    )
    g.add_argument(
        "--max-error-rate",
        metavar="FRACTION",
        help="exit 3 when more than this share of measured requests failed, e.g. 5%% "
        "(default: only when every one failed)",
    )
    g.add_argument("--slo", help="goodput SLOs: ttft=600ms,tpot=50ms,e2e=5s (the default)")
    g.add_argument(
        "--goodput",
        nargs="+",
        metavar="KEY:MS",
        help="vLLM-style SLOs, e.g. ttft:600 tpot:50 e2el:5000 (same as --slo)",
    )
    g.add_argument("--status-interval", help="status line period (1s)")
    g.add_argument("--metrics-port", type=int, help="serve client metrics on this port (0: any)")
    g.add_argument("--metrics-host", help="interface for --metrics-port (127.0.0.1)")
    g.add_argument("--pushgateway", metavar="URL", help="push client metrics at the end")
    g.add_argument("--grafana-url", metavar="URL", help="annotate phases (token: $GRAFANA_TOKEN)")
    g.add_argument("--web", action="store_true", default=S, help="serve locust's web UI")
    g.add_argument("--web-host", help="web UI interface (127.0.0.1)")
    g.add_argument("--web-port", type=int, help="web UI port (8089)")
    g = p.add_argument_group("distributed")
    g.add_argument("--workers", type=int, help="spawn N local locust worker processes")
    g.add_argument("--master", action="store_true", default=S, help="be a master for --worker")
    g.add_argument("--expect-workers", type=int, help="--master: wait for N workers (1)")
    g.add_argument("--master-host", help="master address (workers) / bind address (master)")
    g.add_argument("--master-port", type=int, help="master port (5557)")
    g.add_argument("--worker", action="store_true", default=S, help="be a worker of --master-host")


def parser() -> argparse.ArgumentParser:
    """The full command-line parser."""
    top = argparse.ArgumentParser(
        prog="llmload",
        description="llmload load generator: exact TTFT/ITL/E2E, sync vs streaming.",
    )
    sub = top.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a load test", argument_default=argparse.SUPPRESS)
    _add_run_options(run)
    lt = sub.add_parser(
        "loadtest",
        help="run; with an empty --target start the bundled server first",
        argument_default=argparse.SUPPRESS,
    )
    _add_run_options(lt)
    lt.add_argument("--engine", help="bundled server engine (default: best available)")
    lt.add_argument("--server-arg", action="append", help="extra bundled-server argument")
    wk = sub.add_parser("worker", help="a locust worker process for a master")
    wk.add_argument("--master-host", default="127.0.0.1", help="the master's address (127.0.0.1)")
    wk.add_argument("--master-port", type=int, default=5557, help="the master's port (5557)")
    for p in (run, lt, wk):
        p.add_argument("--log-level", default="WARNING", help="logging level (WARNING)")
    return top


@dataclass(frozen=True)
class Invocation:
    """A parsed command line: the subcommand and what it runs with."""

    command: str  # "run" | "loadtest" | "worker"
    argv: list[str]  # the full command, for run.json (redacted there)
    options: RunOptions | None = None  # run / loadtest
    engine: str = ""  # loadtest: bundled server engine
    server_args: list[str] = field(default_factory=list)
    master_host: str = "127.0.0.1"  # worker
    master_port: int = 5557


def parse(argv: Sequence[str] | None = None) -> Invocation:
    """Parse (plan file included) and set up logging; ``ValueError``/``OSError`` on bad input.

    ``llmload.run.main`` dispatches the result; this module only reads the command line.
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    ns = parser().parse_args(args_list)
    given = vars(ns)
    logging.basicConfig(
        level=str(given.pop("log_level", "WARNING")).upper(),
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    command = given.pop("command")
    argv_full = ["python", "-m", "llmload.loadtests", *args_list]
    if command == "worker":
        host, port = given["master_host"], given["master_port"]
        return Invocation("worker", argv_full, master_host=host, master_port=port)
    engine = given.pop("engine", "")
    server_args = given.pop("server_arg", [])
    plan = load_plan(given.pop("plan")) if given.get("plan") else {}
    given.pop("plan", None)
    opts = build_options(plan, given)
    if opts.worker:
        host, port = opts.master_host, opts.master_port
        return Invocation("worker", argv_full, master_host=host, master_port=port)
    return Invocation(command, argv_full, opts, engine or "", list(server_args))
