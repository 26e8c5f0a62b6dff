"""``python -m bench model``: the transformers engines on the embedded model, side by side.

1. single stream: SSE decode tokens/s through the server vs raw ``model.generate``;
2. 20 concurrent users, no think time: aggregate output tokens/s and TTFT for
   ``--batching none`` (a generate thread per request) vs ``continuous``;
3. sync vs stream TTFT at 1 and 20 users (continuous engine).

The server runs as its own process (``python -m target_server``), the client is a
plain ``httpx.AsyncClient`` with kept-alive connections.  Writes BENCHMARKS.md
section ``model``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass

import httpx

from bench.mdsection import load_note, machine, write_section
from loadtests.percentile import percentile

CHAT = "/v1/chat/completions"
MESSAGES = [
    {"role": "user", "content": "Summarise why time to first token matters when streaming."}
]


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


def pct(values: list[float], q: float) -> float:
    """The harness's one percentile (``loadtests.percentile``) of a non-empty list."""
    return percentile(sorted(values), q)


async def request(
    client: httpx.AsyncClient, stream: bool, max_tokens: int, seed: int, greedy: bool = False
) -> Result:
    """One chat request; TTFT is the first content event (stream) or the whole body (sync)."""
    body = {"messages": MESSAGES, "max_tokens": max_tokens, "ignore_eos": True, "seed": seed}
    if greedy:
        body["temperature"] = 0.0
    t0 = time.perf_counter()
    if not stream:
        r = await client.post(CHAT, json=body)
        e2e = time.perf_counter() - t0
        r.raise_for_status()
        return Result(e2e, e2e, int(r.json()["usage"]["completion_tokens"]))
    body.update(stream=True, stream_options={"include_usage": True})
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
    e2e = time.perf_counter() - t0
    assert first is not None
    return Result(first, e2e, tokens, first, last)


async def users(
    url: str,
    n: int,
    per_user: int,
    stream: bool,
    max_tokens: int,
    spawn_s: float = 0.0,
    vary: bool = False,
    greedy: bool = False,
) -> tuple[list[Result], float]:
    """``n`` closed-loop users, ``per_user`` requests each, no think time; (results, wall s).

    ``spawn_s``: users start evenly over this many seconds (locust's spawn rate);
    ``vary``: each request's max_tokens is drawn from [max_tokens/2, 3*max_tokens/2]
    (seeded), so users do not stay in lock-step.
    """
    limits = httpx.Limits(max_connections=n + 2, max_keepalive_connections=n + 2)
    rng = random.Random(n * 1000 + per_user)
    lo, hi = (max_tokens // 2, 3 * max_tokens // 2) if vary else (max_tokens, max_tokens)
    sizes = [[rng.randint(lo, hi) for _ in range(per_user)] for _ in range(n)]
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        await asyncio.gather(*(request(client, stream, 4, i) for i in range(min(n, 4))))  # warm

        async def user(u: int) -> list[Result]:
            await asyncio.sleep(spawn_s * u / n)
            return [
                await request(client, stream, sizes[u][k], u * 100 + k, greedy)
                for k in range(per_user)
            ]

        t0 = time.perf_counter()
        per = await asyncio.gather(*(user(u) for u in range(n)))
        wall = time.perf_counter() - t0
    return [r for rs in per for r in rs], wall


def raw_generate_tps(tokens: int, repeats: int = 5) -> tuple[float, str]:
    """Best-of-N decode tokens/s of greedy ``model.generate``, same model: (N-1)/(T_N - T_1)."""
    import torch

    from target_server.model.loader import load
    from target_server.settings import Settings

    lm = load(Settings(engine="transformers"))
    text = lm.tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    ids = torch.tensor([lm.tokenizer.encode(text, add_special_tokens=False)])

    def timed(n: int) -> float:
        t0 = time.perf_counter()
        with torch.inference_mode():
            lm.model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        return time.perf_counter() - t0

    timed(8)
    t1 = min(timed(1) for _ in range(repeats))
    tn = min(timed(tokens) for _ in range(repeats))
    return (tokens - 1) / (tn - t1), lm.describe()


def decode_step_s(batch: int, steps: int = 20, repeats: int = 3) -> float:
    """Best-of time of one decode step for ``batch`` rows (the engine's own batch code)."""
    import torch

    from target_server.model.kvbatch import PaddedBatch
    from target_server.model.loader import load
    from target_server.settings import Settings

    lm = load(Settings(engine="transformers"))
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            rows = PaddedBatch(lm.model, lm.cache_kwarg, lm.device)
            rows.prefill([list(range(3, 43))] * batch)
            t0 = time.perf_counter()
            for k in range(steps):
                rows.decode([5] * batch, [40 + k] * batch)
            best = min(best, (time.perf_counter() - t0) / steps)
    return best


def ms(x: float) -> str:
    return f"{x * 1000:.0f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench model", description=__doc__)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--per-user", type=int, default=5, help="requests per user (closed loop)")
    parser.add_argument("--spawn-s", type=float, default=1.0, help="users start over this many s")
    parser.add_argument("--tokens", type=int, default=64, help="max_tokens under load")
    parser.add_argument("--single-tokens", type=int, default=128)
    parser.add_argument("--no-write", action="store_true", help="print, do not touch BENCHMARKS.md")
    args, _ = parser.parse_known_args(argv)  # `python -m bench` passes everyone's extra args
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    t_start = time.monotonic()
    load_before = os.getloadavg()[0]

    raw_tps, described = raw_generate_tps(args.single_tokens)
    print(f"raw generate: {raw_tps:.0f} tok/s ({described})", flush=True)
    steps = {b: decode_step_s(b) for b in (1, args.users)}
    rows: dict[str, dict[str, object]] = {}
    # "none-torch" = the seeds' setup on CPU: every generate thread with torch's default threads
    runs = {
        "continuous": ("continuous", {}),
        "none": ("none", {}),
        "none-torch": ("none", {"LLMLOAD_TORCH_THREADS": str(os.cpu_count() or 1)}),
    }
    from bench.procs import start_server_process

    for name, (batching, env) in runs.items():
        server = start_server_process(
            "--log-level", "warning", "--engine", "transformers", "--batching", batching,
            env=env, ready_timeout=300,
        )  # fmt: skip
        url = server.url
        try:
            row: dict[str, object] = {}
            single, _ = asyncio.run(users(url, 1, 5, True, args.single_tokens, greedy=True))
            row["single_tps"] = max(r.decode_tps for r in single)
            one, _ = asyncio.run(users(url, 1, 5, True, args.tokens))
            row["single_ttft"] = statistics.median(r.ttft for r in one)
            many, wall = asyncio.run(
                users(url, args.users, args.per_user, True, args.tokens, args.spawn_s, vary=True)
            )
            row["agg_tps"] = sum(r.tokens for r in many) / wall
            row["ttft"] = [r.ttft for r in many]
            if batching == "continuous":
                burst, wall = asyncio.run(users(url, args.users, 2, True, args.tokens))
                row["burst_tps"] = sum(r.tokens for r in burst) / wall
                row["burst_ttft"] = [r.ttft for r in burst]
                for n in (1, args.users):
                    spawn = args.spawn_s if n > 1 else 0.0
                    sync, _ = asyncio.run(users(url, n, 2, False, args.tokens, spawn))
                    strm, _ = asyncio.run(users(url, n, 2, True, args.tokens, spawn))
                    row[f"sync{n}"] = [r.ttft for r in sync]
                    row[f"stream{n}"] = [r.ttft for r in strm]
            rows[name] = row
            print(f"{name}: {row['agg_tps']:.0f} tok/s aggregate", flush=True)
        finally:
            server.stop(timeout=30)
    body = render(args, raw_tps, described, rows, steps, load_before, time.monotonic() - t_start)
    print(body)
    if not args.no_write:
        write_section("model", body)
    return 0


def render(
    args: argparse.Namespace,
    raw_tps: float,
    described: str,
    rows: dict[str, dict[str, object]],
    steps: dict[int, float],
    load_before: float,
    took: float,
) -> str:
    """The BENCHMARKS.md section."""
    c, n, nt = rows["continuous"], rows["none"], rows["none-torch"]
    u = args.users

    def f(row: dict[str, object], key: str) -> float:
        return float(row[key])  # type: ignore[arg-type]

    def lst(row: dict[str, object], key: str) -> list[float]:
        return list(row[key])  # type: ignore[call-overload]

    ratio_single = f(c, "single_tps") / raw_tps
    ratio_agg = f(c, "agg_tps") / f(n, "agg_tps")
    ratio_agg_torch = f(c, "agg_tps") / f(nt, "agg_tps")
    ttft_ratio = pct(lst(c, "ttft"), 95) / f(c, "single_ttft")

    def goal(ok: bool) -> str:
        return "met" if ok else "**not met**"

    lines = [
        f"`python -m bench model` — {machine()}; {load_note(load_before)}; {took:.0f} s.",
        "",
        f"Model: {described}.",
        "",
        f"**1. Single stream** ({args.single_tokens} tokens, greedy, best of 5 — the least "
        "disturbed run of each path on a shared machine):",
        "",
        "| path | decode tokens/s |",
        "|---|---|",
        f"| raw `model.generate` (in-process, no streamer) | {raw_tps:.0f} |",
        f"| SSE through the server, `--batching continuous` | {f(c, 'single_tps'):.0f} |",
        f"| SSE through the server, `--batching none` | {f(n, 'single_tps'):.0f} |",
        f"| SSE, `--batching none`, torch's default threads | {f(nt, 'single_tps'):.0f} |",
        "",
        f"Server/raw (continuous): **{ratio_single:.2f}** "
        f"(goal ≥ 0.9: {goal(ratio_single >= 0.9)}).",
        "",
        f"**2. {u} concurrent users, no think time** ({args.per_user} streamed requests each, "
        f"max_tokens drawn from {args.tokens // 2}–{3 * args.tokens // 2} (mean {args.tokens}), "
        f"`ignore_eos`; users start over {args.spawn_s:g} s as with locust's spawn rate):",
        "",
        "| engine | aggregate output tokens/s | TTFT p50 | TTFT p95 | single-user TTFT |",
        "|---|---|---|---|---|",
    ]
    threads = os.cpu_count() or 1
    for name, row in (
        ("none (thread per request)", n),
        (f"none, torch's default {threads} threads per generate thread (the seeds' setup)", nt),
        ("continuous", c),
    ):
        t = lst(row, "ttft")
        lines.append(
            f"| {name} | {f(row, 'agg_tps'):.0f} | {ms(pct(t, 50))} | {ms(pct(t, 95))} "
            f"| {ms(f(row, 'single_ttft'))} |"
        )
    b = lst(c, "burst_ttft")
    lines.append(
        f"| continuous, lock-step burst (all {u} at once, {args.tokens} tokens each, 2 rounds) "
        f"| {f(c, 'burst_tps'):.0f} | {ms(pct(b, 50))} | {ms(pct(b, 95))} | — |"
    )
    lines += [
        "",
        f"Continuous / none aggregate: **{ratio_agg:.1f}×** (goal ≥ 8×: {goal(ratio_agg >= 8)}; "
        f"**{ratio_agg_torch:.1f}×** against the seeds' thread setup); "
        f"continuous TTFT p95 at {u} users / its single-user TTFT: **{ttft_ratio:.1f}×** "
        f"(goal ≤ 3×: {goal(ttft_ratio <= 3)}).",
        "",
        f"Ceiling on this machine: one decode step costs {steps[1] * 1000:.1f} ms for 1 row "
        f"and {steps[u] * 1000:.1f} ms for {u} rows (best of 3, one thread), so batching can raise "
        f"throughput at most {u * steps[1] / steps[u]:.1f}× over one stream at a time — "
        "and the `none` engine's threads also run on the second core while the "
        "continuous engine's one decode thread shares its core with the event loop. "
        "The 8× goal assumes a device where a batch costs about what one row costs "
        "(a GPU: `make bench-gpu`).",
        "",
        f"A lock-step burst makes every request wait for all {u} prompts' prefill (compute-bound "
        "on a CPU: about one single-user prefill per prompt), so its TTFT p95 is far above the "
        "spread-out load's; on a GPU prefill is cheap and the two converge (see `bench-gpu`).",
        "",
        f"**3. Sync vs stream TTFT** (continuous engine, 2 requests per user, {args.tokens} "
        "tokens; sync TTFT = the whole response, the user sees nothing before):",
        "",
        "| users | sync TTFT p50 | stream TTFT p50 | sync/stream |",
        "|---|---|---|---|",
    ]
    for k in (1, u):
        s50, t50 = pct(lst(c, f"sync{k}"), 50), pct(lst(c, f"stream{k}"), 50)
        lines.append(f"| {k} | {ms(s50)} | {ms(t50)} | {s50 / t50:.1f}× |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
