"""mypy over the repository's folders, each under the name it installs as.

mypy maps a file to a module by its directory, and cannot read setuptools'
``package-dir``: ``reports/gate/verdict.py`` would be ``reports.gate.verdict``, while every import
says ``llmload.reports.gate.verdict``.  This reads the mapping from pyproject.toml (its one
declaration) and hands mypy every file with the module name it installs as, so
imports resolve to the sources and errors name the real paths.  mypy's options
still come from ``[tool.mypy]``; arguments are passed on (``--warn-unused-ignores``).

    python scripts/typecheck.py            # what `make lint` runs
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from mypy import build
from mypy.errors import CompileError
from mypy.main import process_options
from mypy.modulefinder import BuildSource

ROOT = Path(__file__).resolve().parents[1]


def mapping() -> dict[str, str]:
    """Package name -> folder, as pyproject.toml's ``[tool.setuptools.package-dir]`` says."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["tool"]["setuptools"]["package-dir"])


def sources() -> list[BuildSource]:
    """Every module of every mapped folder, named as installed (``llmload.reports.gate.holm``)."""
    out = []
    for package, folder in mapping().items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out.append(BuildSource(str(path.relative_to(ROOT)), ".".join((package, *parts))))
    return out


def main(argv: list[str]) -> int:
    _, options = process_options(argv, require_targets=False)
    try:
        result = build.build(sources(), options)
    except CompileError as exc:
        result_errors = exc.messages
    else:
        result_errors = result.errors
    for line in result_errors:
        print(line)
    files = len(sources())
    if result_errors:
        print(f"mypy: {len(result_errors)} lines of errors in {files} files", file=sys.stderr)
        return 1
    print(f"Success: no issues found in {files} source files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
