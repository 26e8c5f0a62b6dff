"""``python -m bench model``: the embedded engine, today's against the one before, side by side.

Both servers run in the same bench run on the same machine
(``--batching continuous``, the bundled server's default):

* **before** — the tree at ``BASELINE`` (the last commit before the lean decode
  path: 6 x 384 embedded model, ``DynamicCache`` padded batch), extracted with
  ``git archive`` and started from there with the same interpreter;
* **now** — this checkout.

Measured on each, through the server's SSE stream:

1. single-stream decode tokens/s (greedy, 128 tokens, best of 3);
2. 20 concurrent streams started together, 64 tokens each, aggregate output tokens/s
   (1 and 2 interleaved between the two servers, best of 3, so both see the same machine);
3. the default workload, run as a user runs it: ``python -m llmload.loadtests run`` with
   ``make loadtest``'s defaults (``mix`` scenario, the model's own sampling, 20
   users, first starts spread (the default), 3 s pacing, sync then stream), reporting SLO-met share,
   TTFT/TPOT/E2E, the server's CPU use and (now) its engine busy ratio.

Writes BENCHMARKS.md section ``model`` and the headline into docs/engines.md
(section ``model-headline``), each with the machine's calibration.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.calibration import current as calibration
from bench.mdsection import ROOT, load_note, machine, write_section
from llmload.loadtests.percentile import percentile
from llmload.target_server.launch import ServerProcess, launch

#: "today's" engine for the side-by-side: the commit before the lean decode path
BASELINE = "bb43461"
ENGINES_DOC = ROOT / "docs" / "engines.md"
CHAT = "/v1/chat/completions"
MESSAGES = [
    {"role": "user", "content": "Summarise why time to first token matters when streaming."}
]
#: make loadtest's defaults (Makefile), minus the duration
DEFAULT_LOAD = (
    "--scenario",
    "mix",
    "--users",
    "20",
    "--spawn-rate",
    "20",
    "--pacing",
    "3s",
    "--modes",
    "sync,stream",
    "--seed",
    "0",
)


@dataclass
class Result:
    """One request as the client saw it (seconds from send)."""

    ttft: float
    e2e: float
    tokens: int
    first: float | None = None
    last: float | None = None

    @property
    def decode_tps(self) -> float:
        """(tokens - 1) / (last - first) for a streamed request."""
        assert self.first is not None and self.last is not None and self.last > self.first
        return (self.tokens - 1) / (self.last - self.first)


async def request(
    client: httpx.AsyncClient, max_tokens: int, seed: int, greedy: bool = False
) -> Result:
    """One streamed chat request; TTFT is the first content event."""
    body: dict[str, Any] = {
        "messages": MESSAGES,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "seed": seed,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if greedy:
        body["temperature"] = 0.0
    t0 = time.perf_counter()
    first = last = None
    tokens = 0
    async with client.stream("POST", CHAT, json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
            if any(c["delta"].get("content") for c in chunk["choices"]):
                last = time.perf_counter() - t0
                first = last if first is None else first
    assert first is not None
    return Result(first, time.perf_counter() - t0, tokens, first, last)


async def users(
    url: str, n: int, per_user: int, max_tokens: int, greedy: bool = False
) -> tuple[list[Result], float]:
    """``n`` users started together, ``per_user`` back-to-back requests each; (results, wall s)."""
    limits = httpx.Limits(max_connections=n + 2, max_keepalive_connections=n + 2)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        await asyncio.gather(*(request(client, 4, i) for i in range(min(n, 4))))  # warm

        async def user(u: int) -> list[Result]:
            return [await request(client, max_tokens, u * 100 + k, greedy) for k in range(per_user)]

        t0 = time.perf_counter()
        per = await asyncio.gather(*(user(u) for u in range(n)))
        wall = time.perf_counter() - t0
    return [r for rs in per for r in rs], wall


def baseline_tree(commit: str, dest: Path) -> Path:
    """The repository at ``commit``, extracted under ``dest`` (no git state touched)."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True, check=True
    ).stdout
    tree = dest / f"llmload-{commit}"
    tree.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def serve(tree: Path | None) -> ServerProcess:
    """The bundled server's default engine, from ``tree`` (None: this checkout)."""
    args = ("--log-level", "warning", "--engine", "transformers", "--batching", "continuous")
    env = {"PYTHONPATH": str(tree)} if tree is not None else None
    return launch(args, env=env, cwd=tree or ROOT, ready_timeout=900)


class Sampler:
    """The server's CPU use and engine busy ratio, sampled every second during a load."""

    def __init__(self, server: ServerProcess):
        self.proc = psutil.Process(server.proc.pid)
        self.url = server.url
        self.busy: list[float] = []
        self._stop = threading.Event()
        self._cpu0 = self._t0 = 0.0
        self.cores = 0.0

    def _cpu(self) -> float:
        procs = [self.proc, *self.proc.children(recursive=True)]
        return sum(p.cpu_times().user + p.cpu_times().system for p in procs)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            with contextlib.suppress(httpx.HTTPError):
                text = httpx.get(self.url + "/metrics", timeout=5).text
                for line in text.splitlines():
                    if line.startswith("llmserve_engine_busy_ratio "):
                        self.busy.append(float(line.split()[1]))

    @contextlib.contextmanager
    def during(self) -> Iterator[None]:
        self._cpu0, self._t0 = self._cpu(), time.monotonic()
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._stop.set()
            thread.join()
            self.cores = (self._cpu() - self._cpu0) / (time.monotonic() - self._t0)


def default_load(url: str, out: Path, duration: str, warmup: str) -> dict[str, Any]:
    """``make loadtest``'s defaults against ``url``; the run's summary.json."""
    cmd = [
        sys.executable,
        "-m",
        "llmload.loadtests",
        "run",
        "--target",
        url,
        *DEFAULT_LOAD,
        "--duration",
        duration,
        "--warmup",
        warmup,
        "--out",
        str(out),
        "--label",
        "bench-model",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    summary = out / "summary.json"
    if not summary.exists():
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return dict(json.loads(summary.read_text(encoding="utf-8")))


def speeds(servers: dict[str, ServerProcess], args: argparse.Namespace) -> dict[str, Any]:
    """Single-stream and concurrent tokens/s of every server, interleaved, best of ``repeats``.

    Interleaving (before, now, before, now, ...) lets both see the same machine: on a
    shared machine the load from other jobs moves by the minute.
    """
    out: dict[str, dict[str, Any]] = {n: {"single": [], "agg": [], "ttft": []} for n in servers}
    for _ in range(args.repeats):
        for name, server in servers.items():
            single, _ = asyncio.run(users(server.url, 1, 1, args.single_tokens, greedy=True))
            out[name]["single"].append(single[0].decode_tps)
            many, wall = asyncio.run(users(server.url, args.users, 1, args.tokens))
            out[name]["agg"].append(sum(r.tokens for r in many) / wall)
            out[name]["ttft"].append([r.ttft for r in many])
    return {
        name: {
            "single_tps": max(m["single"]),
            "agg_tps": max(m["agg"]),
            "agg_ttft": m["ttft"][m["agg"].index(max(m["agg"]))],
        }
        for name, m in out.items()
    }


def workload(server: ServerProcess, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The default workload on one server, with its CPU use and engine busy ratio."""
    sampler = Sampler(server)
    with sampler.during():
        summary = default_load(server.url, out, args.duration, args.warmup)
    busy = statistics.mean(sampler.busy) if sampler.busy else None
    return {"summary": summary, "cores": sampler.cores, "busy": busy}


def decode_step_s(batch: int, steps: int = 30, repeats: int = 3) -> float:
    """Best-of time of one decode step for ``batch`` rows (this checkout's engine, in-process)."""
    import torch

    from llmload.target_server.model.kvbatch import SlotBatch
    from llmload.target_server.model.loader import load
    from llmload.target_server.settings import Settings

    lm = load(Settings(engine="transformers"))
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            rows = SlotBatch(lm.model, lm.cache_kwarg, lm.device)
            rows.prefill([list(range(3, 43))] * batch)
            t0 = time.perf_counter()
            for _k in range(steps):
                rows.decode([5] * batch)
            best = min(best, (time.perf_counter() - t0) / steps)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench model", description=__doc__)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=64, help="max_tokens, concurrent streams")
    parser.add_argument("--single-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds (best of)")
    parser.add_argument("--duration", default="30s", help="each phase of the default workload")
    parser.add_argument("--warmup", default="10s", help="warm-up of the default workload")
    parser.add_argument("--baseline", default=BASELINE, help="commit of 'before' (bb43461)")
    parser.add_argument("--no-write", action="store_true", help="print, do not touch the docs")
    args, _ = parser.parse_known_args(argv)  # `python -m bench` passes everyone's extra args
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    cal = calibration()  # before the bench loads the machine
    t_start = time.monotonic()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-model-") as tmp:
        trees = {"before": baseline_tree(args.baseline, Path(tmp)), "now": None}
        servers: dict[str, ServerProcess] = {}
        try:
            for name, tree in trees.items():
                servers[name] = serve(tree)
            rows = speeds(servers, args)
            for name, server in servers.items():
                print(
                    f"{name}: {rows[name]['single_tps']:.0f} tok/s single, "
                    f"{rows[name]['agg_tps']:.0f} tok/s at {args.users}",
                    flush=True,
                )
                rows[name].update(workload(server, Path(tmp) / f"run-{name}", args))
        finally:
            for server in servers.values():
                server.stop(timeout=30)
    steps = {b: decode_step_s(b) for b in (1, args.users)}
    took = time.monotonic() - t_start
    body = render(args, rows, steps, cal.line(), load_before, took)
    print(body)
    if not args.no_write:
        write_section("model", body)
        write_section("model-headline", headline(args, rows, cal.line()), path=ENGINES_DOC)
    return 0


def _phase(row: dict[str, Any], mode: str) -> dict[str, Any]:
    return dict(row["summary"]["phases"].get(mode) or {})


def ms(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f} ms"


def headline(args: argparse.Namespace, rows: dict[str, dict[str, Any]], cal: str) -> str:
    """The few figures docs/engines.md (and the README) quote."""
    b, n = rows["before"], rows["now"]
    s, y = _phase(n, "stream"), _phase(n, "sync")
    busy = "–" if n["busy"] is None else f"{n['busy']:.0%}"
    return "\n".join(
        [
            f"Written by `make bench` (`python -m bench model`); {cal}.",
            "",
            f"- single-stream decode: **{n['single_tps']:,.0f} tokens/s** "
            f"({n['single_tps'] / b['single_tps']:.1f}× the engine before, same run);",
            f"- {args.users} concurrent streams: **{n['agg_tps']:,.0f} tokens/s** aggregate "
            f"({n['agg_tps'] / b['agg_tps']:.1f}×);",
            f"- `make loadtest` defaults (mix, 20 users / 3 s): "
            f"{s.get('slo_met_rate', 0.0):.0%} of streamed requests met the default SLOs, "
            f"stream TTFT p50 {ms(s.get('ttft_ms', {}).get('p50'))} (sync "
            f"{ms(y.get('ttft_ms', {}).get('p50'))}), E2E p50 stream "
            f"{ms(s.get('e2e_ms', {}).get('p50'))} / sync {ms(y.get('e2e_ms', {}).get('p50'))}; "
            f"engine busy {busy}.",
        ]
    )


def render(
    args: argparse.Namespace,
    rows: dict[str, dict[str, Any]],
    steps: dict[int, float],
    cal: str,
    load_before: float,
    took: float,
) -> str:
    """The BENCHMARKS.md section."""
    b, n = rows["before"], rows["now"]
    u = args.users
    r1, ru = n["single_tps"] / b["single_tps"], n["agg_tps"] / b["agg_tps"]

    def goal(ok: bool) -> str:
        return "met" if ok else "**not met**"

    lines = [
        f"`python -m bench model` — {machine()}; {load_note(load_before)}; {took:.0f} s.",
        "",
        f"{cal} (measured before the bench started).",
        "",
        f"**before** = the tree at `{args.baseline}` (6 × 384 embedded model, 10 M parameters, "
        "`DynamicCache` padded batch); **now** = this checkout (1 × 256, 1.2 M parameters, "
        "slot KV cache, fused sampling). Both `--batching continuous`, up together in this run; "
        f"single-stream and concurrent figures interleaved (before, now, …), best of "
        f"{args.repeats} rounds, measured through the SSE stream; the default workload ran on "
        "one, then the other.",
        "",
        "| | single-stream decode tokens/s (greedy, "
        f"{args.single_tokens} tokens, best of {args.repeats}) "
        f"| {u} concurrent streams, aggregate tokens/s ({args.tokens} tokens each) "
        f"| TTFT p50 / p95 at {u} |",
        "|---|---|---|---|",
    ]
    for name, row in (("before", b), ("now", n)):
        t = sorted(row["agg_ttft"])
        lines.append(
            f"| {name} | {row['single_tps']:,.0f} | {row['agg_tps']:,.0f} "
            f"| {ms(percentile(t, 50) * 1000)} / {ms(percentile(t, 95) * 1000)} |"
        )
    lines += [
        "",
        f"Now / before: single stream **{r1:.1f}×** (goal ≥ 4×: {goal(r1 >= 4)}), "
        f"{u} streams **{ru:.1f}×** (goal ≥ 4×: {goal(ru >= 4)}).",
        "",
        f"**The default workload** (`make loadtest`'s defaults: {' '.join(DEFAULT_LOAD)}, "
        f"{args.duration} per phase after a {args.warmup} warm-up; default SLOs "
        f"`{n['summary'].get('slo') or 'ttft=600ms,tpot=50ms,e2e=5s'}`):",
        "",
        "| | phase | requests | SLO met | TTFT p50 / p95 | TPOT p50 | E2E p50 / p95 "
        "| output tokens/s | server CPU (cores) | engine busy |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in (("before", b), ("now", n)):
        for mode in ("sync", "stream"):
            p = _phase(row, mode)
            if not p:
                continue
            busy = "–" if row["busy"] is None else f"{row['busy']:.0%}"
            ttft, e2e = p.get("ttft_ms", {}), p.get("e2e_ms", {})
            tpot = p.get("tpot_ms", {}).get("p50") if mode == "stream" else None
            lines.append(
                f"| {name} | {mode} | {p.get('count', 0)} | {p.get('slo_met_rate', 0.0):.0%} "
                f"| {ms(ttft.get('p50'))} / {ms(ttft.get('p95'))} | {ms(tpot)} "
                f"| {ms(e2e.get('p50'))} / {ms(e2e.get('p95'))} "
                f"| {p.get('output_tokens_per_s', 0.0):,.0f} | {row['cores']:.2f} | {busy} |"
            )
    lines += [
        "",
        "Server CPU is the server process's CPU seconds per wall second over the whole "
        "workload (both phases and the warm-up); engine busy is the mean of "
        "`llmserve_engine_busy_ratio` sampled every second (the engine before had none).",
        "",
        f"One decode step now costs {steps[1] * 1000:.2f} ms for 1 row and "
        f"{steps[u] * 1000:.2f} ms for {u} rows (best of 3, in-process, one thread): the "
        f"batch of {u} costs {steps[u] / steps[1]:.1f}× one row.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
