"""``python -m bench server``: the synthetic engine's timing error at 1-1000 concurrent streams.

The server runs as its own process (``python -m llmload.target_server``); this
process is the client (``--pin``: server on CPU 0, client on CPU 1): a lean asyncio
raw-socket client that sends streaming chat requests back to back on
kept-alive connections and does no SSE parsing beyond counting content
events per read and decoding the final ``x_llmload`` block.  Server-recorded
figures come from ``x_llmload`` (TTFT, per-request largest ITL gap) and from
the ``llmserve_inter_token_latency_seconds`` sum/count (mean ITL).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from math import nan
from pathlib import Path
from time import perf_counter

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from bench.mdsection import load_average, machine, write_section
from llmload.loadtests.percentile import percentile_of
from llmload.target_server.launch import launch

ROOT = Path(__file__).resolve().parent.parent
LEVELS = (1, 20, 200, 1000)
MARK = b'"delta":{"content":'
ITL_METRIC = "llmserve_inter_token_latency_seconds"
FLOOR_PERIOD_MS = 10.0


@dataclass
class Level:
    """Everything measured at one concurrency."""

    streams: int
    ttft_server: list[float] = field(default_factory=list)
    itl_max_server: list[float] = field(default_factory=list)
    ttft_client: list[float] = field(default_factory=list)
    gaps_client: list[float] = field(default_factory=list)
    errors: int = 0
    events: int = 0
    itl_mean_server: float = float("nan")
    loop: str = "auto"
    server_cpu: float = float("nan")
    server_wait: float = float("nan")
    client_cpu: float = float("nan")
    wall: float = 0.0


async def _one_stream(host: str, port: int, request: bytes, until: float, out: Level) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while perf_counter() < until:
            t0 = perf_counter()
            writer.write(request)
            await reader.readuntil(b"\r\n\r\n")
            first = last = None
            tail = b""
            gaps: list[float] = []
            while not tail.endswith(b"\r\n0\r\n\r\n"):
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("server closed the stream")
                now = perf_counter()
                k = data.count(MARK)
                if k:
                    if last is None:
                        first, k = now, k - 1
                    else:
                        gaps.append(now - last)
                        k -= 1
                    gaps.extend([0.0] * k)
                    last = now
                tail = (tail + data)[-4096:]
            i = tail.rfind(b'"x_llmload":')
            x, _ = json.JSONDecoder().raw_decode(tail[i + 12 :].decode())
            assert first is not None
            out.ttft_client.append(first - t0)
            out.gaps_client.extend(gaps)
            out.ttft_server.append(x["ttft_s"])
            if x.get("itl_max_s") is not None:
                out.itl_max_server.append(x["itl_max_s"])
            out.events += len(gaps) + 1
    except (OSError, ValueError, KeyError, asyncio.IncompleteReadError):
        out.errors += 1
    finally:
        writer.close()


def _itl_sum_count(url: str) -> tuple[float, float]:
    text = httpx.get(url + "/metrics", timeout=30).text
    total = count = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == ITL_METRIC + "_sum":
                total += s.value
            elif s.name == ITL_METRIC + "_count":
                count += s.value
    return total, count


async def run_level(url: str, streams: int, tokens: int, window: float) -> Level:
    """``streams`` connections, started over a ramp, each looping requests until the window ends."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps(
        {
            "messages": [{"role": "user", "content": "Count slowly."}],
            "max_tokens": tokens,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    out = Level(streams)
    ramp = min(2.0, streams * 0.002)
    t0 = perf_counter()
    until = t0 + ramp + window
    rng = random.Random(streams)

    async def delayed(offset: float) -> None:
        await asyncio.sleep(offset)
        await _one_stream(host, int(port), request, until, out)

    await asyncio.gather(*(delayed(rng.uniform(0, ramp)) for _ in range(streams)))
    out.wall = perf_counter() - t0
    return out


async def _timer_errors(itl: float, seconds: float) -> list[float]:
    errors: list[float] = []
    start = perf_counter() + 0.01
    for i in range(int(seconds / itl)):
        deadline = start + i * itl
        delay = deadline - perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        errors.append(perf_counter() - deadline)
    return errors


def timer_floor(loop: str, itl_ms: float, seconds: float) -> list[float]:
    """In a fresh process: how late a bare event-loop sleep to an absolute deadline wakes."""
    coro = _timer_errors(itl_ms / 1000, seconds)
    if loop in ("auto", "uvloop"):
        with contextlib.suppress(ImportError):
            import uvloop

            return uvloop.run(coro)
    return asyncio.run(coro)


def _start_server(args: argparse.Namespace, loop: str) -> tuple[subprocess.Popen[str], str]:
    pin = (lambda: os.sched_setaffinity(0, {0})) if args.pin else None
    server = launch(
        [
            "--log-level",
            "warning",
            "--ttft-ms",
            str(args.ttft_ms),
            "--itl-ms",
            str(args.itl_ms),
            "--loop",
            loop,
        ],
        cwd=ROOT,
        preexec_fn=pin,
        ready_timeout=30,
    )
    return server.proc, server.url


def runqueue_wait_s(pid: int) -> float:
    """Seconds the process's threads spent runnable but waiting for a CPU (schedstat)."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(stat.read_text().split()[1])
    return total / 1e9


def _run_server(args: argparse.Namespace, loop: str, streams: list[int]) -> list[Level]:
    """Start one server with ``loop`` and measure each concurrency against it."""
    proc, url = _start_server(args, loop)
    levels: list[Level] = []
    try:
        server = psutil.Process(proc.pid)
        for n in streams:
            s0, c0 = _itl_sum_count(url)
            cpu0, me0 = sum(server.cpu_times()[:2]), sum(os.times()[:2])
            wait0 = runqueue_wait_s(proc.pid)
            lv = asyncio.run(run_level(url, n, args.tokens, args.window))
            lv.loop = loop
            lv.server_cpu = 100 * (sum(server.cpu_times()[:2]) - cpu0) / lv.wall
            lv.server_wait = 100 * (runqueue_wait_s(proc.pid) - wait0) / lv.wall
            lv.client_cpu = 100 * (sum(os.times()[:2]) - me0) / lv.wall
            s1, c1 = _itl_sum_count(url)
            lv.itl_mean_server = (s1 - s0) / max(1.0, c1 - c0)
            levels.append(lv)
            print(
                f"loop={loop} streams={n}: {len(lv.ttft_server)} requests, {lv.errors} errors, "
                f"cpu server {lv.server_cpu:.0f}% client {lv.client_cpu:.0f}%",
                flush=True,
            )
    finally:
        proc.terminate()
        proc.wait(10)
    return levels


def render(args: argparse.Namespace, levels: list[Level], load: str, floor: list[float]) -> str:
    """The BENCHMARKS.md section."""
    ttft, itl = args.ttft_ms, args.itl_ms
    fl = [v * 1000 for v in floor]
    # an empty sample reads nan, not None: a table cell either way
    fl50, fl99 = (percentile_of(fl or [nan], q) for q in (50, 99))
    rows = [
        "| streams | requests | errors | events/s | CPU server / client | server waiting for a CPU "
        "| server CPU per event "
        "| server TTFT err p50 / p99 / max | server mean ITL err | server max-gap err p50 / p99 "
        "| client TTFT p50 / p99 | client ITL p50 / p99 |",
        "|---|---:|---:|---:|---|---:|---:|---|---:|---|---|---|",
    ]
    for lv in levels:
        e = [(v * 1000 - ttft) for v in lv.ttft_server]
        g = [(v * 1000 - itl) for v in lv.itl_max_server]
        ct = [v * 1000 for v in lv.ttft_client]
        cg = [v * 1000 for v in lv.gaps_client]
        (e50, e99), (g50, g99), (ct50, ct99), (cg50, cg99) = (
            (percentile_of(x or [nan], 50), percentile_of(x or [nan], 99)) for x in (e, g, ct, cg)
        )
        rate = lv.events / lv.wall
        cells = [
            f"{lv.streams}" + (f" (`{lv.loop}` loop)" if lv.loop != args.loop else ""),
            str(len(lv.ttft_server)),
            str(lv.errors),
            f"{rate:,.0f}",
            f"{lv.server_cpu:.0f}% / {lv.client_cpu:.0f}%",
            f"{lv.server_wait:.1f}%",
            f"{lv.server_cpu / 100 / rate * 1e6:.0f} µs" if rate else "–",
            f"{e50:+.2f} / {e99:+.2f} / {max(e, default=0):+.2f} ms",
            f"{lv.itl_mean_server * 1000 - itl:+.3f} ms",
            f"{g50:+.2f} / {g99:+.2f} ms",
            f"{ct50:.1f} / {ct99:.1f} ms",
            f"{cg50:.1f} / {cg99:.1f} ms",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(
        [
            "## Bundled server: synthetic engine timing error",
            "",
            f"`python -m bench server` — {machine()}.",
            "",
            f"Configured: TTFT {ttft:g} ms, ITL {itl:g} ms, {args.tokens} tokens per request, "
            f"streaming chat requests back to back on kept-alive connections for "
            f"{args.window:g} s after a start ramp (2 ms per stream, at most 2 s); event loop "
            f"`{args.loop}`. The server and the client are separate processes (the client: one "
            "asyncio process on raw sockets, counting content events per read, no SSE parsing), "
            + (
                "pinned to CPU 0 and CPU 1. "
                if args.pin
                else "not pinned (the kernel balances them over both cores). "
            )
            + f"Load average at start: {load} "
            "— the machine was shared with other work while measuring.",
            "",
            "*Server TTFT err* = server-recorded TTFT (arrival → first content event written) "
            "minus the configured TTFT. *Server mean ITL err* = mean of every server-recorded "
            "gap (`llmserve_inter_token_latency_seconds` sum/count) minus the configured ITL. "
            "*Server max-gap err* = per request, the largest gap between content events written "
            "(`x_llmload.itl_max_s`) minus the configured ITL. Client columns are what the "
            "client process saw (its TTFT includes the request write and loopback). *Server "
            "waiting for a CPU* = share of the wall time the server's threads were runnable but "
            "not running (`/proc/PID/task/*/schedstat`): other work on the box taking its core.",
            "",
            *rows,
            "",
            f"Noise floor: a bare `asyncio.sleep` to absolute deadlines every {FLOOR_PERIOD_MS:g} "
            "ms "
            f"for 4 s in a fresh process (same event loop, no HTTP) woke late by p50 "
            f"{fl50:+.2f} / p99 {fl99:+.2f} / max {max(fl, default=0):+.2f} ms just before the "
            "run — "
            "the part of the errors above that the machine, not the server, is responsible for.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Run every level, print the table, write the BENCHMARKS.md section."""
    p = argparse.ArgumentParser(prog="python -m bench server", description=__doc__)
    p.add_argument("--levels", default=",".join(map(str, LEVELS)))
    p.add_argument("--ttft-ms", type=float, default=100.0)
    p.add_argument("--itl-ms", type=float, default=50.0)
    p.add_argument("--tokens", type=int, default=40)
    p.add_argument("--window", type=float, default=8.0, help="seconds of traffic per level")
    p.add_argument("--loop", default="auto", choices=("auto", "asyncio", "uvloop"))
    p.add_argument(
        "--pin",
        action="store_true",
        help="pin the server to CPU 0 and the client to CPU 1 (hurts when others share CPU 0)",
    )
    p.add_argument(
        "--compare-loop",
        type=int,
        default=200,
        help="also run this many streams on the asyncio loop (0 = skip)",
    )
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    load = load_average()
    if args.pin:
        os.sched_setaffinity(0, {1 % (os.cpu_count() or 1)})
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        floor = pool.submit(timer_floor, args.loop, FLOOR_PERIOD_MS, 4.0).result()
    levels = _run_server(args, args.loop, [int(x) for x in args.levels.split(",")])
    if args.compare_loop and args.loop != "asyncio":
        # the same load on the pure-asyncio loop, side by side with the default
        levels += _run_server(args, "asyncio", [args.compare_loop])
    md = render(args, levels, load, floor)
    print(md)
    if not args.no_write:
        write_section("server", md)
    return 0 if all(lv.errors == 0 and lv.ttft_server for lv in levels) else 1


if __name__ == "__main__":
    sys.exit(main())
