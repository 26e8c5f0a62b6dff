"""The layout without links: one spelling per module, and a checkout that cannot hold links works.

The folders (``reports/``, ``loadtests/``, ...) install as ``llmload.reports``,
``llmload.loadtests``, ... by pyproject's ``package-dir`` mapping alone; there is no
symbolic link in the repository.  A folder imported by its bare name (``import
reports`` from the repository root, where the working directory is on ``sys.path``)
refuses, so no module ever has two module objects.  The last test copies the
checkout file by file (as a zip download or ``core.symlinks=false`` clone has it),
installs the copy in editable mode into a venv of its own, and from the copy's root
runs the unit tests that read the checkout's own files and a real ``llmload run``
against the synthetic server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from tests.fixtures.server_proc import start_server_process

ROOT = Path(__file__).resolve().parents[2]
with open(ROOT / "pyproject.toml", "rb") as _f:
    MAPPING: dict[str, str] = tomllib.load(_f)["tool"]["setuptools"]["package-dir"]
#: where nothing of ours lives: the venv, caches, runs
SKIP = {".git", ".venv", "runs", "build", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def py(
    code: str, cwd: Path, python: str | Path = sys.executable, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-c", code, *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def checkout_files() -> list[Path]:
    """What a clone holds: tracked files and new ones not ignored (relative paths)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [Path(p) for p in listed.split("\0") if p and (ROOT / p).exists()]


def test_the_repository_holds_no_symbolic_link() -> None:
    staged = subprocess.run(
        ["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert [ln for ln in staged.splitlines() if ln.startswith("120000")] == []
    links = [
        str(p.relative_to(ROOT))
        for top in ROOT.iterdir()
        if top.name not in SKIP
        for p in ([top] if top.is_symlink() else top.rglob("*") if top.is_dir() else [])
        if p.is_symlink()
    ]
    assert links == []


@pytest.mark.parametrize("folder", sorted(set(MAPPING.values()) - {"llmload"}))
def test_a_folder_imported_by_its_bare_name_refuses(folder: str) -> None:
    # from the repository root the folder is importable as a top-level package: it must
    # refuse, or its modules would exist twice (llmload.reports.x and reports.x)
    bare = py(f"import {folder}", ROOT)
    assert bare.returncode == 1
    assert f"ImportError: {folder} installs as llmload.{folder}: import that" in bare.stderr


ONE_OBJECT = r"""
import importlib, json, pkgutil, sys, tomllib
from pathlib import Path
root = Path(sys.argv[1])
mapping = tomllib.load(open(root / "pyproject.toml", "rb"))["tool"]["setuptools"]["package-dir"]
for info in pkgutil.walk_packages(importlib.import_module("llmload").__path__, "llmload."):
    if info.name.endswith("__main__") or ".model" in info.name or info.name == "llmload.run":
        continue  # entry points; torch; the gevent patch
    importlib.import_module(info.name)
folders = [(root / f).resolve() for f in mapping.values()]
ours = {n: m for n, m in sys.modules.items() if getattr(m, "__file__", None)
        and any(Path(m.__file__).resolve().is_relative_to(f) for f in folders)}
bare = sorted(n for n in ours if not n.startswith("llmload"))
wrong = []
for name, mod in ours.items():
    if not name.startswith("llmload"):
        continue
    package = max((p for p in mapping if name == p or name.startswith(p + ".")), key=len)
    folder = (root / mapping[package]).resolve()
    if not Path(mod.__file__).resolve().is_relative_to(folder):
        wrong.append(f"{name}: {mod.__file__}")
seen = sorted({p for n in ours for p in mapping if n == p or n.startswith(p + ".")})
print(json.dumps({"modules": len(ours), "bare": bare, "wrong": wrong, "packages": seen}))
"""


def test_every_module_has_one_name_and_lives_in_its_mapped_folder() -> None:
    got = py(ONE_OBJECT, ROOT, sys.executable, str(ROOT))
    assert got.returncode == 0, got.stderr[-3000:]
    found = json.loads(got.stdout)
    assert found["bare"] == [] and found["wrong"] == []
    assert found["packages"] == sorted(MAPPING)  # the walk reached every mapped folder


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The checkout copied file by file (no links), installed editable in a venv of its own."""
    tmp = tmp_path_factory.mktemp("nolinks")
    src = tmp / "src"
    for rel in checkout_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel, follow_symlinks=True)
    env_dir = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", env_dir], check=True)
    (python,) = (env_dir / "bin").glob("python3.*")
    site = Path(
        py("import sysconfig; print(sysconfig.get_paths()['purelib'])", tmp, python).stdout.strip()
    )
    # the dependencies from this venv, as plain path entries (its own .pth files unread):
    # the copy's install is the only llmload the new venv's site machinery knows
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps"]
        + ["--no-build-isolation", "--ignore-installed", "-e", str(src)],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return src, env_dir / "bin"


def test_the_copy_imports_its_own_files(copy: tuple[Path, Path]) -> None:
    src, bin_dir = copy
    for where in (src, src.parent):  # the copy's root (its folders on sys.path) and elsewhere
        got = py(ONE_OBJECT, where, bin_dir / "python", str(src))
        assert got.returncode == 0, got.stderr[-3000:]
        found = json.loads(got.stdout)
        assert found["bare"] == [] and found["wrong"] == []
        assert found["packages"] == sorted(MAPPING)


def reads_the_checkout(test: Path) -> bool:
    """A unit test module that finds files of the checkout by its own path (docs, dashboards,
    fixtures, pyproject): what a copy without links could break.  The rest of the unit tests
    import modules only, which ``test_the_copy_imports_its_own_files`` covers."""
    return "__file__" in test.read_text()


def test_the_copy_passes_unit_tests_and_runs(copy: tuple[Path, Path], tmp_path: Path) -> None:
    src, bin_dir = copy
    tests = sorted(str(t.relative_to(src)) for t in (src / "tests/unit").glob("test_*.py"))
    tests = [t for t in tests if reads_the_checkout(src / t)]
    assert len(tests) >= 10  # docs links, dashboards, the options table, transcripts, ...
    unit = subprocess.run(
        [bin_dir / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert unit.returncode == 0, unit.stdout[-3000:]
    with start_server_process(
        "--engine", "synthetic", "--ttft-ms", "20", "--itl-ms", "5"
    ) as server:
        out = tmp_path / "run"
        run = subprocess.run(
            [bin_dir / "llmload", "run", "--target", server.url, "--users", "2"]
            + ["--spawn-rate", "10", "--pacing", "0.2s", "--duration", "2s", "--out", str(out)]
            + ["--status-interval", "60"],
            cwd=src,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
    assert run.returncode == 0, run.stderr[-3000:]
    records = [json.loads(ln) for ln in (out / "requests.jsonl").read_text().splitlines()]
    assert records and {r["status"] for r in records} == {"ok"}
    assert json.loads((out / "run.json").read_text())["status"] == "completed"
    assert (out / "report.html").is_file()
