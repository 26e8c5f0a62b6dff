"""The slim core for real: a wheel built here, a fresh venv from it, no torch, a run.

``pip install llmload`` must give the load generator, the reports and gate and the
synthetic server without torch, transformers or gradio.  This test builds the
wheel from a clean copy of the sources (a stale ``build/`` cannot leak into it),
installs it into a new venv (its dependencies from the package index; pip's cache
makes a second time quick), checks that torch is not importable there, starts
``llmload serve`` from that venv and runs ``llmload run`` against it, then reads
the run with ``llmload report`` — all with the slim venv's own executables.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from llmload.target_server.launch import LISTENING, wait_healthy

ROOT = Path(__file__).resolve().parents[2]
with open(ROOT / "pyproject.toml", "rb") as _f:
    #: installed package -> folder (pyproject's package-dir)
    MAPPING: dict[str, str] = tomllib.load(_f)["tool"]["setuptools"]["package-dir"]
#: the repository's folders that install as llmload's subpackages
SUBPACKAGES = tuple(f for p, f in MAPPING.items() if p != "llmload")
#: what the wheel is built from: pyproject, setup.py (the packages of each mapped folder),
#: the readme, the folders
SOURCES = ("pyproject.toml", "setup.py", "README.md", *MAPPING.values())


def sh(*cmd: str | Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in ``cwd``: an empty directory for the slim venv's commands, since
    ``python -c`` puts its working directory first on sys.path (the checkout's packages
    must not stand in for the wheel's, nor /tmp/gradio for gradio)."""
    return subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def slim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with only the wheel and its core dependencies; its ``bin/`` directory."""
    tmp = tmp_path_factory.mktemp("slim")
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    # the dev venv's setuptools builds it (no isolated build env to download)
    built = sh(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        tmp / "dist",
        src,
        cwd=tmp,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("llmload-*.whl")
    venv.create(tmp / "venv", with_pip=False)
    py = tmp / "venv" / "bin" / "python"
    # this pip installs into the new venv (--python): no pip of its own needed there
    done = sh(
        sys.executable,
        "-m",
        "pip",
        "--python",
        py,
        "install",
        "-q",
        "--no-compile",
        "--prefer-binary",
        wheel,
        cwd=tmp,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return tmp / "venv" / "bin"


def test_the_core_venv_is_well_under_400_mb(slim: Path) -> None:
    files = [f for f in slim.parent.rglob("*") if f.is_file() and not f.is_symlink()]
    size = sum(f.stat().st_size for f in files)
    print(f"slim venv: {size / 2**20:.0f} MiB (no pip, no .pyc)")
    assert size < 300 * 2**20  # the bound the issue sets is 400 MB, with room for pip


SITE = r"""
import importlib.metadata as md, json, site, os
ours = sorted(name for name, dists in md.packages_distributions().items() if "llmload" in dists)
listed = sorted(os.listdir(site.getsitepackages()[0]))
print(json.dumps({"ours": ours, "listed": listed}))
"""


def test_site_packages_gains_only_the_llmload_namespace(slim: Path, tmp_path: Path) -> None:
    proc = sh(slim / "python", "-c", SITE, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    # the one top-level name the distribution installs; its folders are subpackages of it
    assert got["ours"] == ["llmload"]
    assert not set(SUBPACKAGES) & set(got["listed"]), got["listed"]
    probe = "import llmload.loadtests.run.runner as r, llmload.reports as p; print(r.__file__)"
    where = sh(slim / "python", "-c", probe, cwd=tmp_path)
    assert where.returncode == 0 and "site-packages/llmload/loadtests/run/" in where.stdout


def test_no_torch_transformers_or_gradio(slim: Path, tmp_path: Path) -> None:
    probe = "import importlib.util as u; print([m for m in ('torch', 'transformers', 'gradio') if u.find_spec(m)])"  # noqa: E501 - one probe program, kept on one line
    proc = sh(slim / "python", "-c", probe, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr
    assert sh(slim / "python", "-c", "import torch", cwd=tmp_path).returncode != 0
    # `llmload ci-gate` (the example workflow's step) finds its baseline in the installed package
    probe = "import llmload.ci as c; print(c.BASELINE.is_file(), c.BASELINE)"
    where = sh(slim / "python", "-c", probe, cwd=tmp_path)
    assert where.stdout.startswith("True ") and "site-packages" in where.stdout, where.stdout
    # the transformers engine says what to install instead of a traceback
    asked = sh(slim / "llmload", "serve", "--engine", "transformers", "--port", "0", cwd=tmp_path)
    assert asked.returncode == 1
    assert "pip install 'llmload[server]'" in asked.stderr and "Traceback" not in asked.stderr


IMPORT_ALL = r"""
from gevent import monkey; monkey.patch_all()
import importlib, pkgutil, sys
failed = []
for pkg in ("llmload",):
    for info in pkgutil.walk_packages(importlib.import_module(pkg).__path__, pkg + "."):
        if info.name.startswith("llmload.target_server.model") or info.name.endswith("__main__"):
            continue  # the transformers engine: the [server] extra
        try:
            importlib.import_module(info.name)
        except Exception as exc:
            failed.append(f"{info.name}: {exc!r}")
heavy = [m for m in ("torch", "transformers", "gradio") if m in sys.modules]
print(failed, heavy)
"""


def test_every_core_module_imports_without_the_extras(slim: Path, tmp_path: Path) -> None:
    proc = sh(slim / "python", "-c", IMPORT_ALL, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[] []", proc.stdout + proc.stderr


def test_run_against_the_synthetic_server_from_the_slim_venv(slim: Path, tmp_path: Path) -> None:
    server = subprocess.Popen(
        [
            slim / "llmload",
            "serve",
            "--engine",
            "synthetic",
            "--port",
            "0",
            "--ttft-ms",
            "20",
            "--itl-ms",
            "5",
            "--log-level",
            "warning",
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        url = ""
        for line in server.stderr:
            m = LISTENING.search(line)
            if m:
                url = m.group(1)
                break
        assert url, "the slim venv's server never listened"
        wait_healthy(url, 30, alive=lambda: server.poll() is None)
        out = tmp_path / "run"
        run = sh(
            slim / "llmload",
            "run",
            "--target",
            url,
            "--users",
            "2",
            "--spawn-rate",
            "10",
            "--pacing",
            "0.2s",
            "--duration",
            "2s",
            "--modes",
            "sync,stream",
            # the random dataset's prompts come from the embedded tokenizer: no torch
            "--dataset",
            "random",
            "--input-len",
            "32",
            "--output-len",
            "8",
            "--out",
            out,
            "--status-interval",
            "60",
            cwd=tmp_path,
            timeout=120,
        )
    finally:
        server.terminate()
        server.wait(15)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    records = [json.loads(ln) for ln in (out / "requests.jsonl").read_text().splitlines()]
    assert records and {r["status"] for r in records} == {"ok"}
    assert {r["mode"] for r in records} == {"sync", "stream"}
    assert json.loads((out / "run.json").read_text())["config"]["dataset"] == "random"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["phases"]["stream"]["ttft_ms"]["p50"] > 0 and (out / "report.html").exists()
    # the reports and the gate need no torch either
    base = tmp_path / "base.json"
    made = sh(slim / "llmload", "report", "baseline", out, "--out", base, cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-2000:]
    gate = sh(
        slim / "llmload",
        "report",
        "gate",
        out,
        "--baseline",
        base,
        "--min-samples",
        "5",
        cwd=tmp_path,
    )
    assert gate.returncode in (0, 2), gate.stdout + gate.stderr  # same data: never a regression
    assert "llmload gate" in gate.stdout
