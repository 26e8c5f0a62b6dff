"""``make ci-gate``: a short loadtest against the bundled synthetic server, gated on TTFT.

One place holds the run's settings, so the committed baseline, ``make ci-gate``,
the gate tests and ``python -m bench gate`` all measure the same thing::

    llmload ci-gate                    # run + gate against the committed baseline
    llmload ci-gate --write-baseline   # run + rewrite reports/baselines/ci-synthetic.json
    llmload ci-gate --paired --ttft-ms 240   # A/B, B/A, A/B against a baseline server

``--paired`` is the pattern for two builds: a second bundled server (the baseline,
``--baseline-ttft-ms``) runs in turn with the candidate, phase by phase (A/B, B/A,
A/B with ``--repeat``, 3 by default), so the machine's drift hits both alike, and the gate
compares the two within one run, pair by pair — no baseline file (with ``--history
DIR``: the pairs' spread pooled with the earlier jobs').  In a pipeline the two targets
are the main branch's deployment and the pull request's (``llmload run --target PR
--baseline-target MAIN --repeat 3``, then ``llmload report gate RUN``).

(``python -m llmload.reports ci-gate`` is the same.)  It composes three packages — the
bundled server (``target_server.launch``), the load generator and the gate
(``reports.cli``) — so it lives at the top, beside ``llmload.run``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from llmload import reports
from llmload.loadtests import recordfile
from llmload.reports.build import read_summary
from llmload.reports.cli import add_gate_options
from llmload.reports.cli import main as reports_main
from llmload.reports.page.terminal import render_terminal
from llmload.target_server.launch import LaunchFailed, launch

#: shipped with the package (package data), so an installed wheel gates as a checkout does
BASELINE = Path(reports.__file__).resolve().parent / "baselines" / "ci-synthetic.json"
#: the bundled server: synthetic engine, 200 ms to first token, 10 ms per token, +-20 ms jitter
SERVER_TTFT_MS = 200.0
SERVER_ITL_MS = 10.0
SERVER_JITTER_MS = 20.0
SERVER_ARGS = (f"--itl-ms={SERVER_ITL_MS:g}", f"--jitter-ms={SERVER_JITTER_MS:g}")
#: ``--paired``'s repeats unless given: three pairs, the fewest a paired interval is
#: worth reading from (two degrees of freedom)
PAIRED_REPEATS = 3
#: the load: 32 closed-loop users back to back, streaming only, 2 s warm-up, 10 s measured.
#: 32, not 8: the ITL check compares the p95 of every gap, and 8 users' ~2,300 gaps moved it
#: too much from run to run to tell +20 % from the +10 % allowance every time (13 of 21
#: pairs); 32 users' ~8,300 do (21 of 21): ``python -m bench gate``, docs/reports.md
LOAD_ARGS = (
    "--users",
    "32",
    "--spawn-rate",
    "32",
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
    """``llmload run`` for one CI-length run against ``target`` (``extra`` wins)."""
    cmd = [sys.executable, "-m", "llmload.loadtests", "run", "--target", target, *LOAD_ARGS]
    cmd += ["--out", str(out), *extra]
    return cmd if report else [*cmd, "--no-report"]


def server_args(ttft_ms: float = SERVER_TTFT_MS, token_scale: float = 1.0) -> list[str]:
    """The bundled synthetic server's arguments (``target_server.launch`` adds host and port 0);
    ``token_scale`` stretches every token's time after the first (ITL and its jitter)."""
    if token_scale == 1.0:
        tokens = list(SERVER_ARGS)
    else:
        itl, jitter = SERVER_ITL_MS * token_scale, SERVER_JITTER_MS * token_scale
        tokens = [f"--itl-ms={itl:g}", f"--jitter-ms={jitter:g}"]
    ttft = f"--ttft-ms={ttft_ms:g}"
    return ["--engine", "synthetic", ttft, *tokens, "--log-level", "warning"]


@contextmanager
def synthetic_server(
    ttft_ms: float = SERVER_TTFT_MS, timeout_s: float = 60.0, token_scale: float = 1.0
) -> Iterator[str]:
    """Start the bundled synthetic server; yield its base URL once ``/health`` answers."""
    with launch(server_args(ttft_ms, token_scale), ready_timeout=timeout_s) as server:
        yield server.url


def run_load(
    out: Path, target: str, report: bool = True, extra: Sequence[str] = (), timeout_s: float = 180.0
) -> Path:
    """Run one CI-length load test into ``out``; ``RuntimeError`` (with its output) on failure."""
    cmd = load_command(out, target, report, extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0 or recordfile.find(out) is None:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"load test failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return out


def _gate_options_help() -> str:
    """The gate's options as ``--help`` lists them (ci-gate passes them on unparsed)."""
    helper = argparse.ArgumentParser(prog="llmload report gate", add_help=False)
    add_gate_options(helper)
    text = helper.format_help()
    return text[text.index("\n\n") + 2 :].replace(
        "options:", "gate options (passed on to `llmload report gate`):", 1
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``ci-gate [--write-baseline] [--out DIR] [gate options...]``."""
    p = argparse.ArgumentParser(
        prog="llmload ci-gate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_gate_options_help(),
    )
    p.add_argument("--out", type=Path, default=None, help="run directory (runs/<UTC>-ci-gate)")
    p.add_argument(
        "--baseline", type=Path, default=BASELINE, help="baseline file (the committed one)"
    )
    p.add_argument("--write-baseline", action="store_true", help="write the baseline, no gate")
    p.add_argument(
        "--history",
        type=Path,
        default=None,
        metavar="DIR",
        help="a history CI keeps (artifact or cache): gate against its last comparable runs "
        "once it holds two (before: the baseline file, saying so), then add this run to it "
        "when the gate did not fail; --paired: pool the pairs' spread with its paired runs, "
        "and add every completed run",
    )
    p.add_argument("--ttft-ms", type=float, default=SERVER_TTFT_MS, help="server TTFT (200)")
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="run the measured phase N times (1; --paired: 3, A/B, B/A, A/B, gated pair by pair)",
    )
    p.add_argument(
        "--paired",
        action="store_true",
        help="also start a baseline server and run it in turn with the candidate (A/B, B/A, …); "
        "gate the two within the run instead of against the baseline file",
    )
    p.add_argument(
        "--baseline-ttft-ms",
        type=float,
        default=SERVER_TTFT_MS,
        help="--paired: the baseline server's TTFT (200)",
    )
    args, gate_args = p.parse_known_args(sys.argv[1:] if argv is None else list(argv))
    if args.repeat is None:  # pairs give the between-run spread: one pair gives none
        args.repeat = PAIRED_REPEATS if args.paired else 1
    if args.repeat < 1 or (args.paired and args.write_baseline):
        p.error("--repeat must be >= 1, and --paired writes no baseline")
    out = args.out or Path("runs") / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-ci-gate"
    extra = ["--repeat", str(args.repeat)] if args.repeat > 1 else []
    try:
        with ExitStack() as stack:
            url = stack.enter_context(synthetic_server(args.ttft_ms))
            if args.paired:
                base_url = stack.enter_context(synthetic_server(args.baseline_ttft_ms))
                extra += ["--baseline-target", base_url]
            print(f"ci-gate: {' '.join(load_command(out, url, extra=extra))}", flush=True)
            phases = args.repeat * (2 if args.paired else 1)
            run_load(out, url, extra=extra, timeout_s=150.0 + 30.0 * phases)
        if (out / "summary.json").exists():
            print(render_terminal(read_summary(out / "summary.json")))
            print(f"report: {out / 'report.html'}", flush=True)
    except (LaunchFailed, RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"ci-gate: {exc}", file=sys.stderr)
        return 2
    if args.write_baseline:
        return reports_main(["baseline", str(out), "--out", str(args.baseline)])
    if args.paired and args.history is not None:
        return gate_pairs_with_history(out, args.history, gate_args)
    if args.paired:
        return reports_main(["gate", str(out), *gate_args])
    if args.history is None:
        return reports_main(["gate", str(out), "--baseline", str(args.baseline), *gate_args])
    return gate_with_history(out, args.history, args.baseline, gate_args)


def gate_pairs_with_history(out: Path, history: Path, gate_args: list[str]) -> int:
    """``--paired --history DIR``: gate the pairs with their spread pooled with the earlier
    paired runs' (each about its own mean: a failed job's slowdown does not widen it, so
    every completed job is added)."""
    held = history.is_dir() and any(history.glob("*.json"))
    code = reports_main(
        ["gate", str(out), *(["--history", str(history)] if held else []), *gate_args]
    )
    label = os.environ.get("GITHUB_SHA", "")[:12]
    reports_main(["baseline", str(out), "--history", str(history), "--commit", label])
    return code


def gate_with_history(out: Path, history: Path, baseline: Path, gate_args: list[str]) -> int:
    """Gate ``out`` against the history once it has two runs (the file before), then add the
    run to it unless it failed: a regressed build never becomes the next builds' baseline."""
    held = len(list(history.glob("*.json"))) if history.is_dir() else 0
    if held >= 2:
        code = reports_main(["gate", str(out), "--history", str(history), *gate_args])
    else:
        print(
            f"ci-gate: the history {history} holds {held} runs (2 give a spread): gating "
            f"against {baseline} this time",
            flush=True,
        )
        code = reports_main(["gate", str(out), "--baseline", str(baseline), *gate_args])
    if code != 1:
        label = os.environ.get("GITHUB_SHA", "")[:12]
        reports_main(["baseline", str(out), "--history", str(history), "--commit", label])
    return code
