"""``make ci-gate``: a short loadtest against the bundled synthetic server, gated on TTFT.

One place holds the run's settings, so the committed baseline, ``make ci-gate``,
the gate tests and ``python -m bench gate`` all measure the same thing::

    python -m reports ci-gate                    # run + gate against the committed baseline
    python -m reports ci-gate --write-baseline   # run + rewrite baselines/ci-synthetic.json
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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


def load_command(out: Path, ttft_ms: float = SERVER_TTFT_MS, report: bool = True) -> list[str]:
    """The ``python -m loadtests loadtest`` command line for one CI-length run."""
    cmd = [
        sys.executable,
        "-m",
        "loadtests",
        "loadtest",
        "--target",
        "",
        *LOAD_ARGS,
        "--out",
        str(out),
        "--engine",
        "synthetic",
    ]
    cmd += [f"--server-arg={a}" for a in (f"--ttft-ms={ttft_ms:g}", *SERVER_ARGS)]
    if not report:
        cmd.append("--no-report")
    return cmd


def run_load(
    out: Path, ttft_ms: float = SERVER_TTFT_MS, report: bool = True, timeout_s: float = 180.0
) -> Path:
    """Run one CI-length loadtest into ``out``; ``RuntimeError`` (with its output) on failure."""
    cmd = load_command(out, ttft_ms, report)
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if proc.returncode != 0 or not (out / "requests.jsonl").exists():
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"loadtest failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
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
    print(f"ci-gate: {' '.join(load_command(out, args.ttft_ms))}", flush=True)
    try:
        run_load(out, args.ttft_ms)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"ci-gate: {exc}", file=sys.stderr)
        return 2
    from reports.__main__ import main as reports_main

    if args.write_baseline:
        return reports_main(["baseline", str(out), "--out", str(args.baseline)])
    return reports_main(["gate", str(out), "--baseline", str(args.baseline), *gate_args])
