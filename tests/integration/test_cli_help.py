"""``llmload <command> --help`` documents every flag: none without a help text.

Each registered command is started with argparse's ``parse_known_args`` replaced
by a spy that records the parser and stops; the test walks those parsers (and
their subcommands) in a subprocess — the load commands gevent-patch whoever
imports them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import argparse, contextlib, json
from llmload.cli import COMMANDS

class Stop(Exception):
    'Raised by the spy once a command has built its parser: nothing runs.'

seen = []
def spy(self, args=None, namespace=None):
    seen.append(self)
    raise Stop
argparse.ArgumentParser.parse_known_args = spy

ARGS = {"exporter": ["prometheus-config"]}  # dispatches by hand before its parser
missing, parsers = [], {}

def walk(p, path):
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                walk(sub, path + [name])
        elif a.option_strings and not isinstance(a, argparse._HelpAction) and a.help is None:
            missing.append(" ".join(path) + " " + "/".join(a.option_strings))

for name, cmd in COMMANDS.items():
    seen.clear()
    with contextlib.suppress(Stop, SystemExit):
        cmd.entry()([*cmd.prefix, *ARGS.get(name, [])])
    parsers[name] = len(seen)
    for p in seen:
        walk(p, [name])
print(json.dumps({"missing": missing, "parsers": parsers}))
"""


def test_every_flag_of_every_command_has_help() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(n >= 1 for n in got["parsers"].values()), got["parsers"]  # each was reached
    assert {"run", "serve", "report", "ci-gate", "dashboards"} <= set(got["parsers"])
    assert got["missing"] == [], "flags without help: " + ", ".join(got["missing"])
