"""The run's own files never lie: a disk that fills mid-run, a run directory that cannot be written.

For real: the run directory is a tmpfs the test mounts (small, so the records fill
it within a second or two; remounted read-only for the second case), and the run
is ``llmload run`` against the bundled synthetic server over loopback.  A run whose
disk fills stops within seconds of the first failed write, says in one line what
happened and where the last whole record is, exits 4 (the load generator's own
failure) with run.json's status ``failed``, and keeps a records file of whole lines
that its report agrees with; ``llmload report build`` reads it again elsewhere.  An
``--out`` that cannot be written is refused with exit 2 before the target is even
asked.  Where the test cannot mount (not root, no CAP_SYS_ADMIN) it skips, saying so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: small enough to fill fast: the writer's 256 KiB reserve and ~200 records
TMPFS_SIZE = "512k"


def mount(point: Path, *options: str) -> None:
    cmd = ["mount", "-t", "tmpfs", "-o", ",".join((f"size={TMPFS_SIZE}", *options))]
    done = subprocess.run([*cmd, "tmpfs", str(point)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or 'mount failed'})")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    point = tmp_path / "disk"
    point.mkdir()
    mount(point)
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def llmload(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "llmload", *map(str, args)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_a_run_whose_disk_fills_stops_says_why_and_keeps_whole_records(
    small_disk: Path, start_server: Callable[..., Any], tmp_path: Path
) -> None:
    server = start_server(ttft_ms=2, itl_ms=1)
    out = small_disk / "run"
    began = time.monotonic()
    run = llmload(
        *("run", "--target", server.url, "--users", "8", "--spawn-rate", "100"),
        *("--pacing", "0s", "--duration", "60s", "--modes", "stream", "--max-tokens", "32"),
        *("--out", out, "--status-interval", "60"),
    )
    took = time.monotonic() - began
    said = run.stdout + run.stderr
    assert run.returncode == 4, said[-3000:]
    assert took < 30, f"the run went on for {took:.0f} s after its disk filled"
    assert "Traceback" not in said and "completed" not in said
    assert "could not write" in run.stderr and "No space left on device" in run.stderr
    assert "the file ends with its last whole record" in run.stderr
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"] == "failed" and meta["failure"]["class"] == "output"
    text = (out / "requests.jsonl").read_text()
    lines = text.splitlines()
    assert text.endswith("\n") and lines and all(json.loads(ln) for ln in lines)
    assert meta["records"] == meta["failure"]["records"] == len(lines)
    assert f"({len(lines)} records, failed)" in run.stdout
    if (out / "summary.json").exists():  # the report fit in the reserve: it counts the file
        assert json.loads((out / "summary.json").read_text())["input"]["records"] == len(lines)
    # elsewhere, with room: the report reads every whole record and agrees with run.json
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    built = llmload("report", "build", copy)
    assert built.returncode == 0, built.stderr[-2000:]
    assert json.loads((copy / "summary.json").read_text())["input"]["records"] == len(lines)


def test_an_unwritable_out_is_refused_before_the_target_is_asked(tmp_path: Path) -> None:
    point = tmp_path / "ro"
    point.mkdir()
    mount(point)
    try:
        subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True)
        # the target is a closed port: the directory check must come first, or this
        # would say "cannot reach target"
        run = llmload("run", "--target", "http://127.0.0.1:9", "--out", point / "run")
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "cannot reach" not in run.stderr
    assert f"the run directory {point / 'run'} cannot be written (Read-only file system)" in (
        run.stderr
    )


def test_report_build_names_a_cut_last_line(tmp_path: Path) -> None:
    from tests.fixtures.reports import make_records, write_run

    run_dir = write_run(
        tmp_path / "cut", make_records("stream", "stream", 40, t_start=1_700_000_000.0, seed=1)
    )
    with (run_dir / "requests.jsonl").open("a") as f:
        f.write('{"request_id": "x", "phase": "str')  # the write the disk refused, half done
    built = llmload("report", "build", run_dir)
    assert built.returncode == 0, built.stderr[-2000:]
    assert "requests.jsonl ends with a cut line (41: the run stopped mid-write)" in built.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["input"]["records"] == 40 and summary["input"]["cut_line"] == 41
