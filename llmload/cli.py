"""``llmload <command>``: one console command in front of every package's own CLI.

Each command is one line in ``COMMANDS``: its name, a one-line help, the
``module:function`` that runs it (called with the remaining arguments, returns
the exit code) and the arguments put in front of them.  Modules are imported
only when their command runs, so ``llmload report gate`` never loads gevent and
``llmload serve`` never loads locust.  ``python -m <package>`` keeps working:
both paths call the same functions.

A new command (``llmload capacity``, say) is one more ``register(...)`` call
at the bottom of this module.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata

PROG = "llmload"


@dataclass(frozen=True)
class Command:
    """One ``llmload`` subcommand, resolved lazily to ``module:function(argv) -> int``."""

    name: str
    help: str
    target: str
    prefix: tuple[str, ...] = ()

    def entry(self) -> Callable[[list[str]], int]:
        module, _, func = self.target.partition(":")
        fn: Callable[[list[str]], int] = getattr(importlib.import_module(module), func)
        return fn


COMMANDS: dict[str, Command] = {}


def register(name: str, help: str, target: str, prefix: Sequence[str] = ()) -> Command:
    """Add ``llmload NAME``: ``target`` (``"module:function"``) gets ``prefix + argv``."""
    if name in COMMANDS:
        raise ValueError(f"llmload command {name!r} is registered twice")
    cmd = Command(name, help, target, tuple(prefix))
    COMMANDS[name] = cmd
    return cmd


def version() -> str:
    """The installed distribution's version (``0+unknown`` from a bare checkout)."""
    try:
        return metadata.version("llmload")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def usage() -> str:
    """The top-level help: every command with its help line."""
    width = max(len(n) for n in COMMANDS)
    lines = [
        f"usage: {PROG} [-h] [--version] <command> [options]",
        "",
        "Load testing and latency observability for streaming LLM services.",
        "",
        "commands:",
    ]
    for cmd in COMMANDS.values():
        lines.append(f"  {cmd.name:<{width}}  {cmd.help}")
    lines += [
        "",
        f"`{PROG} <command> --help` shows each command's options; "
        "exit codes are listed in docs/loadgen.md and docs/reports.md.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``llmload`` console script; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if args else 2
    if args[0] == "--version":
        print(f"{PROG} {version()}")
        return 0
    cmd = COMMANDS.get(args[0])
    if cmd is None:
        print(usage(), file=sys.stderr)
        print(f"\n{PROG}: unknown command {args[0]!r}", file=sys.stderr)
        return 2
    return int(cmd.entry()([*cmd.prefix, *args[1:]]))


# --- the commands (mirroring `python -m llmload.<package>`)
register("run", "run a load test against --target", "llmload.run:main", ("run",))
register(
    "loadtest",
    "run; with no --target, start the bundled server first (what `make loadtest` calls)",
    "llmload.run:main",
    ("loadtest",),
)
register("worker", "a load-generator worker for a --master run", "llmload.run:main", ("worker",))
register(
    "serve", "the bundled OpenAI-compatible target server", "llmload.target_server.__main__:main"
)
register(
    "report",
    "build | compare | baseline | gate: read run directories, write reports, gate CI",
    "llmload.reports.cli:main",
)
register(
    "ci-gate",
    "short run on the bundled synthetic server, gated against the committed baseline",
    "llmload.ci:main",
)
register(
    "dashboards",
    "build | check | push: Grafana dashboards as code",
    "llmload.dashboards.__main__:main",
)
register(
    "exporter",
    "prometheus-config: scrape config for the exporter",
    "llmload.exporter.__main__:main",
)
register(
    "capacity",
    "search for the highest load the target sustains within its SLOs (--rate or --users)",
    "llmload.capacity.command:main",
)


if __name__ == "__main__":
    sys.exit(main())
