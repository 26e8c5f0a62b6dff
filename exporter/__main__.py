"""``python -m llmload.exporter prometheus-config ...``: the exporter's command-line tools."""

from __future__ import annotations

import sys

from llmload.exporter import promconfig

COMMANDS = {"prometheus-config": promconfig.main}


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a subcommand."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in COMMANDS:
        print(
            f"usage: python -m llmload.exporter {{{','.join(COMMANDS)}}} [options]", file=sys.stderr
        )
        return 2
    return COMMANDS[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
