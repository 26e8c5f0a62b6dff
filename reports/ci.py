"""``make ci-gate``: a short loadtest against the bundled synthetic server, gated on TTFT.

One place holds the run's settings, so the committed baseline, ``make ci-gate``,
the gate tests and ``python -m bench gate`` all measure the same thing::

    python -m reports ci-gate                    # run + gate against the committed baseline
    python -m reports ci-gate --write-baseline   # run + rewrite baselines/ci-synthetic.json
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_LISTENING = re.compile(r"listening on (http://\S+)")
BASELINE = ROOT / "reports" / "baselines" / "ci-synthetic.json"
#: the bundled server: synthetic engine, 200 ms to first token, 10 ms per token, +-20 ms jitter
SERVER_TTFT_MS = 200.0
SERVER_ARGS = ("--itl-ms=10", "--jitter-ms=20")
#: the load: 8 closed-loop users back to back, streaming only, 2 s warm-up, 10 s measured
LOAD_ARGS = (
    "--users",
    "8",
    "--spawn-rate",
    "8",
    "--pacing",
    "0s",
    "--duration",
    "10s",
    "--warmup",
    "2s",
    "--modes",
    "stream",
    "--scenario",
    "short_qa",
    "--max-tokens",
    "16",
    "--seed",
    "0",
    "--label",
    "ci-gate",
)


def load_command(
    out: Path, target: str, report: bool = True, extra: Sequence[str] = ()
) -> list[str]:
    """``python -m loadtests run`` for one CI-length run against ``target`` (``extra`` wins)."""
    cmd = [sys.executable, "-m", "loadtests", "run", "--target", target, *LOAD_ARGS]
    cmd += ["--out", str(out), *extra]
    return cmd if report else [*cmd, "--no-report"]


def server_command(ttft_ms: float = SERVER_TTFT_MS) -> list[str]:
    """The bundled synthetic server on an ephemeral loopback port."""
    return [
        sys.executable,
        "-m",
        "target_server",
        "--engine",
        "synthetic",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        f"--ttft-ms={ttft_ms:g}",
        *SERVER_ARGS,
        "--log-level",
        "warning",
    ]


@contextmanager
def synthetic_server(ttft_ms: float = SERVER_TTFT_MS, timeout_s: float = 60.0) -> Iterator[str]:
    """Start the bundled synthetic server; yield its base URL once ``/health`` answers."""
    proc = subprocess.Popen(
        server_command(ttft_ms),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    found = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip())
            if _LISTENING.search(line):
                found.set()
        found.set()

    threading.Thread(target=drain, name="ci-server-stderr", daemon=True).start()
    try:
        found.wait(timeout_s)
        m = next((m for ln in lines if (m := _LISTENING.search(ln))), None)
        if m is None:
            raise RuntimeError("target_server never listened:\n" + "\n".join(lines[-30:]))
        url = m.group(1)
        _wait_healthy(url, timeout_s)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_healthy(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def run_load(
    out: Path, target: str, report: bool = True, extra: Sequence[str] = (), timeout_s: float = 180.0
) -> Path:
    """Run one CI-length load test into ``out``; ``RuntimeError`` (with its output) on failure."""
    cmd = load_command(out, target, report, extra)
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if proc.returncode != 0 or not (out / "requests.jsonl").exists():
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"load test failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return out


def main(argv: list[str]) -> int:
    """``ci-gate [--write-baseline] [--out DIR] [gate options...]``."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m reports ci-gate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", type=Path, default=None, help="run directory (runs/<UTC>-ci-gate)")
    p.add_argument("--baseline", type=Path, default=BASELINE)
    p.add_argument("--write-baseline", action="store_true", help="write the baseline, no gate")
    p.add_argument("--ttft-ms", type=float, default=SERVER_TTFT_MS, help="server TTFT (200)")
    args, gate_args = p.parse_known_args(argv)
    out = args.out or ROOT / "runs" / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-ci-gate"
    try:
        with synthetic_server(args.ttft_ms) as url:
            print(f"ci-gate: {' '.join(load_command(out, url))}", flush=True)
            run_load(out, url)
        if (out / "summary.json").exists():
            from reports.markdown import render_terminal

            print(render_terminal(json.loads((out / "summary.json").read_text())))
            print(f"report: {out / 'report.html'}", flush=True)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"ci-gate: {exc}", file=sys.stderr)
        return 2
    from reports.__main__ import main as reports_main

    if args.write_baseline:
        return reports_main(["baseline", str(out), "--out", str(args.baseline)])
    return reports_main(["gate", str(out), "--baseline", str(args.baseline), *gate_args])
