"""The README's commands work when copied: each one runs in its ``--help`` form.

Every command line in a README code block (backslash continuations joined,
comments dropped) is checked: ``llmload <command> [<subcommand>] --help`` must
exit 0 and list every ``--flag`` the line uses; ``make TARGET ...`` must be a
target make knows (``make -n``), and the flags in its ``ARGS="..."`` must be
``llmload loadtest`` flags.  ``export``, ``source`` and ``pip`` lines are
environment set-up and are skipped.  The ``llmload`` lines of ``docs/*.md`` are
checked the same way.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
SKIP = ("export", "source", "pip")


def commands(markdown: str) -> list[str]:
    """Command lines of the ``bash``/``sh``/``console`` code blocks, continuations joined."""
    out: list[str] = []
    for block in re.findall(r"^```(?:bash|sh|shell|console)\n(.*?)^```", markdown, re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line.removeprefix("$ "), comments=True)
            if words and words[0] not in SKIP:
                out.append(shlex.join(words))
    return out


def flags(words: list[str]) -> set[str]:
    return {w.split("=", 1)[0] for w in words if w.startswith("--")}


PROBE = r"""
import contextlib, io, json, sys
from llmload.cli import main
out = {}
for path in json.loads(sys.argv[1]):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            code = main([*path, "--help"])
        except SystemExit as exc:
            code = exc.code or 0
    out[" ".join(path)] = [code, buf.getvalue()]
print(json.dumps(out))
"""


def subcommand(words: list[str]) -> tuple[str, ...]:
    """``llmload report gate RUN --x`` -> ``("report", "gate")``."""
    sub: list[str] = []
    for w in words[1:3]:
        if not re.fullmatch(r"[a-z][a-z-]*", w):
            break
        sub.append(w)
    return tuple(sub)


@functools.cache
def all_help() -> dict[str, tuple[int, str]]:
    """Every ``--help`` the README and docs need, from one process (each start costs ~1 s)."""
    lines = [ln.split(": ", 1)[-1] for ln in commands(README.read_text()) + docs_llmload_lines()]
    paths = {subcommand(shlex.split(ln)) for ln in lines if ln.startswith("llmload")}
    paths |= {("loadtest",), ("run",)}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(sorted(paths))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {k: (code, text) for k, (code, text) in json.loads(proc.stdout.splitlines()[-1]).items()}


def help_text(*sub: str) -> str:
    code, text = all_help().get(" ".join(sub), (None, ""))
    assert code == 0, f"llmload {' '.join(sub)} --help exited {code}"
    return text


def check_llmload(words: list[str]) -> None:
    sub = subcommand(words)
    text = help_text(*sub)
    if sub == ("capacity",):  # its help says every `llmload run` option applies, and means it
        text += help_text("run")
    missing = sorted(f for f in flags(words) if f not in text)
    assert not missing, f"`{shlex.join(words)}`: llmload {' '.join(sub)} has no {missing}"


def check_make(words: list[str]) -> None:
    targets = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
    assigns = [w for w in words[1:] if "=" in w]
    proc = subprocess.run(
        ["make", "-n", *targets, *assigns],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"`{shlex.join(words)}`: {proc.stderr[-1500:]}"
    for a in assigns:
        name, _, value = a.partition("=")
        if name == "ARGS" and "loadtest" in targets:
            missing = sorted(f for f in flags(shlex.split(value)) if f not in help_text("loadtest"))
            assert not missing, f"`{shlex.join(words)}`: llmload loadtest has no {missing}"


def test_the_extraction_sees_continuations_and_comments() -> None:
    md = "```bash\nexport K=1\nllmload run --target URL \\\n  --users 2   # c\nmake test\n```\n"
    assert commands(md) == ["llmload run --target URL --users 2", "make test"]


@pytest.mark.parametrize("line", commands(README.read_text(encoding="utf-8")))
def test_readme_command(line: str) -> None:
    words = shlex.split(line)
    if words[0].endswith("llmload"):
        check_llmload(words)
    elif words[0] == "make":
        check_make(words)
    else:
        pytest.fail(f"README command of an unknown kind (add a check for it): {line}")


def docs_llmload_lines() -> list[str]:
    out = []
    for md in DOCS:
        for line in commands(md.read_text(encoding="utf-8")):
            words = shlex.split(line)
            while words and "=" in words[0] and not words[0].startswith("-"):
                words = words[1:]  # VAR=value before the command
            if words and words[0] == "llmload":
                out.append(f"{md.name}: {shlex.join(words)}")
    return out


@pytest.mark.parametrize("line", docs_llmload_lines())
def test_docs_llmload_command(line: str) -> None:
    check_llmload(shlex.split(line.split(": ", 1)[1]))


def test_a_wrong_flag_is_caught() -> None:
    with pytest.raises(AssertionError, match="no"):
        check_llmload(["llmload", "run", "--no-such-flag"])
