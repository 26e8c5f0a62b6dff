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
from typing import Any

from llmload.loadtests.options import (
    ALIASES,
    DECLARED,
    Declared,
    RunOptions,
    build_options,
    is_unset,
    load_plan,
)

#: --help's title for each options group
TITLES = {
    "connection": "target",
    "load": "load shape",
    "workload": "workload",
    "output": "output",
    "distributed": "distributed",
}


def _help(d: Declared) -> str:
    """The declaration's help, with its default when there is one worth showing."""
    shown = d.spec.shown
    if shown is None and not is_unset(d.default):
        default = d.default
        shown = ",".join(default) if isinstance(default, list) else str(default)
    return f"{d.spec.help} ({shown})" if shown and not d.spec.negate else d.spec.help


def _add_run_options(p: argparse.ArgumentParser) -> None:
    """Every ``RunOptions`` field as a flag, from its one declaration (``loadtests.options``)."""
    S = argparse.SUPPRESS
    p.add_argument("--plan", metavar="FILE", help="TOML test plan; flags override it")
    groups: dict[str, Any] = {}
    for d in DECLARED.values():
        if d.group not in groups:
            groups[d.group] = p.add_argument_group(TITLES.get(d.group, d.group))
        g = groups[d.group]
        kw: dict[str, Any] = {"dest": d.name, "help": _help(d)}
        if d.kind is bool:
            if d.spec.negate:
                flag = "--no-" + d.name.replace("_", "-")
                g.add_argument(flag, action="store_false", default=S, **kw)
            else:
                g.add_argument(d.flag, action="store_true", default=S, **kw)
            continue
        if d.spec.repeat:
            kw["action"] = "append"
        elif d.spec.parse is None and d.kind in (int, float):
            kw["type"] = d.kind
        if d.spec.choices and d.spec.parse is None:
            kw["choices"] = d.spec.choices  # a parsed value is checked after its parse
        elif d.spec.choices:
            kw["metavar"] = "{" + ",".join(d.spec.choices) + "}"
        if d.spec.nargs:
            kw["nargs"] = d.spec.nargs
        if d.spec.metavar:
            kw["metavar"] = d.spec.metavar
        elif d.kind is int:
            kw["metavar"] = "N"
        g.add_argument(d.flag, *d.spec.aliases, **kw)
    for a in ALIASES:
        g = groups[DECLARED[a.to].group]
        kw = {"dest": a.name, "help": a.help, "metavar": a.metavar}
        if a.type is not None:
            kw["type"] = a.type
        if a.nargs is not None:
            kw["nargs"] = a.nargs
        g.add_argument("--" + a.name.replace("_", "-"), **kw)


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
    if opts.distributed.worker:
        host, port = opts.distributed.master_host, opts.distributed.master_port
        return Invocation("worker", argv_full, master_host=host, master_port=port)
    return Invocation(command, argv_full, opts, engine or "", list(server_args))
