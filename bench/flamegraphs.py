"""``python -m bench.flamegraphs [DIR]``: py-spy flame graphs of both ends at 1,000 streams.

Writes three SVGs into ``DIR`` (default ``runs/flamegraphs``, git-ignored: a flame graph
embeds the machine's paths and the module names of the day it was drawn), each a py-spy
recording of one process while it carries 1,000 streams at ITL 50 ms, the load
``bench scale`` measures:

- ``server-1000.svg`` — the bundled synthetic server (TTFT 100 ms, 40 tokens),
  driven by ``bench.server_timing``'s raw-socket client;
- ``client-1000.svg`` — the load generator's timing path alone (``bench
  harness``'s child, http1 client) against the reference server;
- ``run-1000.svg`` — ``llmload run`` itself at 1,000 users (runner, users,
  writer, status line) against the reference server.

The client and the reference server are pinned to different cores.  Open an SVG
in a browser to search and zoom.  ``docs/scale.md`` says what they showed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.calibration import current
from bench.harness import _reference
from bench.server_timing import run_level
from llmload.target_server.launch import launch

ROOT = Path(__file__).resolve().parent.parent
RATE = 200  # samples per second
SECONDS = 10


def _spy() -> str:
    return shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"


def _record(out: Path, target: list[str]) -> list[str]:
    """py-spy without pausing the process at each sample (its timings stay as they are)."""
    return [
        _spy(),
        "record",
        "--rate",
        str(RATE),
        "--format",
        "flamegraph",
        "--nonblocking",
        "--output",
        str(out),
        *target,
    ]


def server(out: Path) -> None:
    args = ["--log-level", "warning", "--ttft-ms", "100", "--itl-ms", "50"]
    with launch(args, cwd=ROOT, ready_timeout=60) as srv:
        spy = subprocess.Popen(
            _record(out, ["--pid", str(srv.proc.pid), "--duration", str(SECONDS + 2)]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        asyncio.run(run_level(srv.url, 1000, 40, SECONDS))
        spy.wait(60)


def client(out: Path) -> None:
    proc, url = _reference(50)
    try:
        child = [
            sys.executable,
            "-m",
            "bench.harness",
            "--child",
            "http1",
            url,
            "1000",
            "50",
            "100",
            str(SECONDS),
        ]
        subprocess.run(
            _record(out, ["--", *child]),
            cwd=ROOT,
            check=True,
            capture_output=True,
            timeout=300,
            preexec_fn=lambda: os.sched_setaffinity(0, {0}),
        )
    finally:
        proc.terminate()
        proc.wait(10)


def run(out: Path) -> None:
    proc, url = _reference(50)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [
                sys.executable,
                "-m",
                "llmload",
                "run",
                "--target",
                url,
                "--users",
                "1000",
                "--spawn-rate",
                "1000",
                "--pacing",
                "0s",
                "--modes",
                "stream",
                "--warmup",
                "0s",
                "--duration",
                f"{SECONDS}s",
                "--max-tokens",
                "16",
                "--ignore-eos",
                "--no-report",
                "--out",
                str(Path(tmp) / "run"),
            ]
            subprocess.run(
                _record(out, ["--", *cmd]),
                cwd=ROOT,
                check=True,
                capture_output=True,
                timeout=300,
                preexec_fn=lambda: os.sched_setaffinity(0, {0}),
            )
    finally:
        proc.terminate()
        proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    """Record the three flame graphs into the directory given (default runs/flamegraphs)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    where = Path(argv[0]) if argv else ROOT / "runs" / "flamegraphs"
    where.mkdir(parents=True, exist_ok=True)
    for name, fn in (("server-1000", server), ("client-1000", client), ("run-1000", run)):
        fn(where / f"{name}.svg")
        print(f"{where / name}.svg", flush=True)
    print(current().line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
