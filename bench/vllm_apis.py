"""``python -m bench vllm-apis``: chat, Responses, Messages, embeddings and rerank against vLLM.

The same prompts, users and seed, one API after another and then again (chat,
Responses, Messages, chat, Responses, Messages: each API's two runs say how
much two runs of one API differ, which a difference between APIs must exceed
to mean anything), against vLLM's CPU build serving the embedded model's
checkpoint — what the newer APIs cost, side by side, on the path users run
(``llmload run --protocol …``), with vLLM's own ``/metrics`` beside each run's
records (its TTFT mean and request count over the run's window).  Then a
three-turn conversation chained by ``previous_response_id``
(``--responses-chain previous``; vLLM keeps responses only with
``VLLM_ENABLE_RESPONSES_API_STORE=1``, which this bench sets).  Then the same
checkpoint served as an embedding model (``--runner pooling --convert embed``):
``--protocol openai-embeddings`` and ``rerank`` with 8 texts a request, the
client's inputs beside vLLM's own request count (vLLM counts each input).

vLLM lives in its own venv (``bench.vllm_cpu``'s docstring: how to make one)::

    LLMLOAD_VLLM_PYTHON=$VLLM/venv/bin/python python -m bench vllm-apis
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

import httpx

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = ("openai-chat", "openai-responses", "anthropic-messages")
#: each run: 4 users, one request a second each, short answers of a fixed budget
RUN = ("--users", "4", "--spawn-rate", "4", "--pacing", "1s", "--modes", "stream")
RUN += ("--scenario", "short_qa", "--max-tokens", "32", "--ignore-eos", "--seed", "7")
#: embeddings and rerank: 8 texts (documents) a request, against vLLM's pooling runner
POOL_RUN = ("--users", "4", "--spawn-rate", "4", "--pacing", "0.5s", "--batch-size", "8")
POOL_RUN += ("--scenario", "short_qa", "--seed", "7")
POOLING = ("--runner", "pooling", "--convert", "embed")


def vllm_requests(url: str) -> float:
    """``vllm:request_success_total``, summed over its labels (vLLM counts each input)."""
    total = 0.0
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("vllm:request_success_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def llmload_run(
    url: str, out: Path, protocol: str, *extra: str, run: tuple[str, ...] = RUN
) -> dict[str, Any]:
    """One ``llmload run``; its ``summary.json`` and the records' unknown-event count."""
    cmd = [sys.executable, "-m", "llmload", "run", "--target", url, "--protocol", protocol]
    cmd += [*run, *extra, "--out", str(out), "--status-interval", "30"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if done.returncode not in (0, 3):
        raise RuntimeError(f"{protocol}: exit {done.returncode}: {done.stderr[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    summary["unknown_events"] = sum(r.get("unknown_events", 0) for r in records)
    summary["inputs_sent"] = sum(r.get("inputs") or 0 for r in records)
    summary["statuses"] = sorted({r["status"] for r in records})
    return summary


def row(protocol: str, summary: dict[str, Any]) -> str:
    """One table row: the client's figures and vLLM's over the same window."""
    phase = summary["phases"]["stream"]
    server = (phase.get("server") or {}).get("latency", {}).get("ttft", {})
    split = phase.get("server", {}).get("ttft_split_ms") or {}
    path = split.get("client", 0) - split.get("server", 0) if split.get("server") else None
    return (
        f"| {protocol} | {phase['count']} | {sum((phase.get('errors') or {}).values())} "
        f"| {phase['ttft_ms']['p50']:.0f} / {phase['ttft_ms']['p95']:.0f} "
        f"| {phase['itl_ms']['p50']:.1f} | {phase['e2e_ms']['p50']:.0f} "
        f"| {phase.get('output_tokens_per_s', 0):.1f} "
        f"| {server.get('mean', 0):.0f} (n {server.get('n', 0):.0f}) "
        f"| {'–' if path is None else f'{path:.1f}'} | {summary['unknown_events']} |"
    )


def pool_row(protocol: str, summary: dict[str, Any], counted: float) -> str:
    """One row of the pooling table: the client's latency and inputs beside vLLM's count."""
    phase = summary["phases"]["sync"]
    pooled = phase.get("pooled") or {}
    e2e = phase["e2e_ms"]
    return (
        f"| {protocol} | {phase['count']} | {sum((phase.get('errors') or {}).values())} "
        f"| {e2e['p50']:.0f} / {e2e['p95']:.0f} / {e2e['p99']:.0f} "
        f"| {pooled.get('inputs_per_s', 0):.1f} | {pooled.get('prompt_tokens_per_s', 0):.0f} "
        f"| {summary['inputs_sent']} | {counted:.0f} |"
    )


def main(argv: list[str] | None = None) -> int:
    from bench.calibration import current
    from bench.mdsection import load_average, machine, write_section
    from bench.vllm_prefix import free_port, start_vllm
    from llmload.target_server.model.embedded import embedded_model_dir

    p = argparse.ArgumentParser(prog="python -m bench vllm-apis", description=__doc__)
    p.add_argument("--vllm-python", default=os.environ.get("LLMLOAD_VLLM_PYTHON"))
    p.add_argument("--duration", default="30s", help="each run's length")
    p.add_argument("--no-write", action="store_true", help="print, do not touch BENCHMARKS.md")
    args, _ = p.parse_known_args(argv)
    if not args.vllm_python:
        print(
            "bench vllm-apis: give --vllm-python PY or set LLMLOAD_VLLM_PYTHON to a vLLM "
            "venv's python; nothing was measured",
            file=sys.stderr,
        )
        return 2
    cal, load = current(), load_average()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    os.environ["VLLM_ENABLE_RESPONSES_API_STORE"] = "1"  # previous_response_id needs it
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        proc = start_vllm(args.vllm_python, embedded_model_dir(), port, Path(tmp) / "vllm.log")
        try:
            started = time.monotonic() - t0
            for lap in range(2):
                for protocol in PROTOCOLS:
                    out = Path(tmp) / f"{protocol}-{lap}"
                    summary = llmload_run(url, out, protocol, "--duration", args.duration)
                    rows.append(row(protocol, summary))
                    print(rows[-1], summary["statuses"], flush=True)
            chained = llmload_run(
                url,
                Path(tmp) / "chained",
                "openai-responses",
                *("--duration", args.duration, "--turns", "3", "--responses-chain", "previous"),
            )
            chain = chained["phases"]["stream"]
        finally:
            proc.terminate()
            proc.wait(60)
        log = Path(tmp) / "vllm-pooling.log"
        proc = start_vllm(args.vllm_python, embedded_model_dir(), port, log, POOLING)
        pool_rows: list[str] = []
        try:
            for protocol in ("openai-embeddings", "rerank"):
                before = vllm_requests(url)
                out = Path(tmp) / protocol
                summary = llmload_run(url, out, protocol, "--duration", args.duration, run=POOL_RUN)
                pool_rows.append(pool_row(protocol, summary, vllm_requests(url) - before))
                print(pool_rows[-1], summary["statuses"], flush=True)
        finally:
            proc.terminate()
            proc.wait(60)
    head = (
        "| API | requests | errors | TTFT p50 / p95 ms | ITL p50 ms | E2E p50 ms "
        "| output tok/s | vLLM TTFT mean ms (n) | client − vLLM TTFT mean ms | unknown events |"
    )
    body = "\n".join(
        [
            "### The newer APIs against a real vLLM (CPU build)",
            "",
            "`LLMLOAD_VLLM_PYTHON=… python -m bench vllm-apis`: vLLM 0.32 (`vllm-cpu`) serving "
            f"the embedded model's checkpoint, healthy after {started:.0f} s; each run "
            f"`llmload run --protocol API {' '.join(RUN)} --duration {args.duration}`, the three "
            "APIs in turn, twice (rows 1–3, then 4–6): the same prompts, users and seed.",
            "",
            head,
            "|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            "Read a difference between APIs against the difference between the two runs of "
            "one API. ITL is per event: vLLM's Responses and Messages streams can carry "
            "several tokens in one delta (the recorded transcripts: 9 and 11 deltas for 16 "
            "tokens), so compare their TTFT, E2E and tokens/s with chat's, not their ITL. "
            "By vLLM 0.32's source, `/v1/messages` does not pass `ignore_eos` on, so its "
            "answers may end early (fewer tokens, a shorter E2E).",
            "",
            "Embeddings and rerank against the same checkpoint served as an embedding model "
            f"(`{' '.join(POOLING)}`; vLLM's rerank then scores by cosine), each run "
            f"`llmload run --protocol API {' '.join(POOL_RUN)} --duration {args.duration}` "
            "(one sync phase: no stream). vLLM counts every input as a request of its own, "
            "so its count over the run is set beside the client's inputs (warm-up and "
            "all phases included on both sides); on this runner its rerank embeds the query "
            "as well as each document, one request more per call than documents.",
            "",
            "| API | requests | errors | E2E p50 / p95 / p99 ms | inputs/s | prompt tokens/s "
            "| inputs sent | vLLM requests counted |",
            "|---|---|---|---|---|---|---|---|",
            *pool_rows,
            "",
            f"Chained by `previous_response_id` (`--turns 3 --responses-chain previous`): "
            f"{chain['count']} requests, {sum((chain.get('errors') or {}).values())} errors, "
            f"TTFT p50 "
            f"{chain['ttft_ms']['p50']:.0f} / p95 {chain['ttft_ms']['p95']:.0f} ms; "
            f"statuses {', '.join(chained['statuses'])}.",
            "",
            f"Machine: {machine()}; load average at start {load}. Lab figures: vLLM and "
            "llmload share the two cores.",
            "",
            cal.line() + ".",
        ]
    )
    if not args.no_write:
        write_section("vllm-apis", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
