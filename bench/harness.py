"""``python -m bench harness``: how exact is the load generator, per HTTP client, per core?

For each client (httpx — the harness's own path, ``loadtests.http.perform`` +
the timing core —, locust's ``HttpSession`` (requests) and ``FastHttpSession``
(geventhttpclient, read with ``iter_content(1024)`` as locust's own
``iter_lines`` does)) a child process pinned to CPU 0 runs N concurrent
streams under gevent against the bundled synthetic server pinned to CPU 1,
and compares each request's client TTFT with the server's own (``x_llmload``).

* TTFT error (client TTFT − server TTFT, p50/p99) at 20, 200, 1000 streams;
* capacity: at 200 streams, shorter and shorter inter-token latencies until the
  p99 error passes 5 ms; the highest SSE events/s one core sustained below it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CLIENTS = ("httpx", "HttpSession", "FastHttpSession")
STREAMS = (20, 200, 1000)
CAPACITY_ITL_MS = (50, 20, 10, 5)
CAPACITY_STREAMS = 200
TTFT_MS, ITL_MS, TOKENS = 100, 100, 16
WINDOW_S, WARM_S = 5.0, 1.5
P99_LIMIT_MS = 5.0
ROOT = Path(__file__).resolve().parent.parent


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


# -- child: one client, one concurrency level (gevent-patched process) ----------------------


def _child(client: str, url: str, streams: int, window: float) -> dict[str, Any]:
    from gevent import monkey

    monkey.patch_all()
    import gevent

    from loadtests.adapters import get_adapter
    from loadtests.adapters.base import Prompt
    from loadtests.http import Target, clock, perform
    from loadtests.timing import RecordMeta, StreamTimer

    os.sched_setaffinity(0, {0})
    adapter = get_adapter("openai-chat")
    target = Target(url, {}, request_timeout=120, stall_timeout=60)
    model = target.detect_model() or "default"
    prompt = Prompt("bench", "p", prompt="hello", max_tokens=TOKENS)
    call = adapter.build(prompt, mode="stream", model=model, options={"ignore_eos": True})
    meta = RecordMeta("x", "bench", "bench", "stream", adapter.endpoint, 0.0)

    def session() -> Any:
        if client == "httpx":
            return target.client()
        from locust.env import Environment

        env = Environment()
        if client == "HttpSession":
            from locust.clients import HttpSession

            return HttpSession(base_url=url, request_event=env.events.request, user=None)
        from locust.contrib.fasthttp import FastHttpSession

        return FastHttpSession(base_url=url, request_event=env.events.request, user=None)

    def one(sess: Any) -> tuple[Any, int]:
        t0 = clock()
        timer = StreamTimer(adapter, t0)
        if client == "httpx":
            perform(sess, target, call, timer)
        else:
            resp = sess.post(call.path, json=call.json, stream=True)
            timer.headers(clock(), resp.status_code)
            chunks = (
                resp.iter_content(chunk_size=None)
                if client == "HttpSession"
                else resp.iter_content(chunk_size=1024, decode_content=False)
            )
            for chunk in chunks:
                timer.feed(chunk, clock())
        rec = timer.finish(clock(), meta)
        return rec, len(rec.itl_s) + 1

    results: list[tuple[float, float]] = []
    events = [0]
    start = clock()
    measure_from, end = start + WARM_S, start + WARM_S + window

    def worker() -> None:
        sess = session()
        one(sess)  # warm: connection and first-request costs are not the target's
        while clock() < end:
            began = clock()
            rec, n = one(sess)
            if began >= measure_from and rec.ok and rec.ttft_s and rec.server_ttft_s:
                results.append((rec.ttft_s, rec.server_ttft_s))
                events[0] += n

    cpu0 = time.process_time()
    gevent.joinall([gevent.spawn(worker) for _ in range(streams)])
    cpu = time.process_time() - cpu0
    errors = [(c - s) * 1000 for c, s in results]
    return {
        "client": client,
        "streams": streams,
        "requests": len(results),
        "p50_ms": _pct(errors, 50),
        "p99_ms": _pct(errors, 99),
        "events_per_s": events[0] / window,
        "cpu_s": cpu,
    }


# -- parent ------------------------------------------------------------------------------------


def _server(itl_ms: int) -> tuple[subprocess.Popen[str], str]:
    sys.path.insert(0, str(ROOT))
    from tests.fixtures.server_proc import start_server_process

    args = ("--ttft-ms", str(TTFT_MS), "--itl-ms", str(itl_ms), "--log-level", "warning")
    handle = start_server_process(*args)
    os.sched_setaffinity(handle.proc.pid, {1})
    return handle.proc, handle.url


def _measure(client: str, url: str, streams: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.harness", "--child", client, url, str(streams)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        return {"client": client, "streams": streams, "error": out.stderr.strip()[-300:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _row(r: dict[str, Any], itl: int | None = None) -> str:
    lead = f"| {r['client']} | {r['streams']} |" + (f" {itl} |" if itl is not None else "")
    if "error" in r:
        return lead + f" failed: {r['error'][:80]} | | | |"
    return (
        lead
        + f" {r['requests']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['events_per_s']:,.0f} |"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and write BENCHMARKS.md's ``harness`` section."""
    argv = list(argv or [])
    if argv[:1] == ["--child"]:
        print(json.dumps(_child(argv[1], argv[2], int(argv[3]), WINDOW_S)))
        return 0
    from bench.mdsection import machine, write_section

    if (os.cpu_count() or 1) < 2:
        print("harness bench needs 2 CPUs (client and server pinned apart)", file=sys.stderr)
        return 1
    load = os.getloadavg()[0]
    proc, url = _server(ITL_MS)
    try:
        ttft = [_measure(c, url, n) for c in CLIENTS for n in STREAMS]
    finally:
        proc.terminate()
        proc.wait(10)
    capacity: list[tuple[int, dict[str, Any]]] = []
    best = dict.fromkeys(CLIENTS, 0.0)
    live = list(CLIENTS)  # a client is dropped once its p99 passed the limit at a lower rate
    for itl in CAPACITY_ITL_MS:
        proc, url = _server(itl)
        try:
            for client in list(live):
                r = _measure(client, url, CAPACITY_STREAMS)
                capacity.append((itl, r))
                if r.get("p99_ms", float("inf")) < P99_LIMIT_MS:
                    best[client] = max(best[client], r["events_per_s"])
                else:
                    live.remove(client)
        finally:
            proc.terminate()
            proc.wait(10)
    for r in ttft + [r for _, r in capacity]:
        print(json.dumps(r), flush=True)
    lines = [
        "## Harness accuracy and capacity per HTTP client",
        "",
        f"`python -m bench harness` on {machine()}; 1-minute load average before the run "
        f"{load:.1f} (the machine is shared: figures measured under that load).",
        f"Client pinned to CPU 0 (gevent, one process), bundled synthetic server pinned to CPU 1; "
        f"each stream sends back-to-back requests of {TOKENS} tokens (TTFT {TTFT_MS} ms); "
        f"{WINDOW_S:g} s measured after {WARM_S:g} s warm-up. TTFT error = client TTFT − "
        "the server's own TTFT (`x_llmload`), in ms.",
        "",
        f"### TTFT error by concurrency (ITL {ITL_MS} ms)",
        "",
        "| client | streams | requests | p50 ms | p99 ms | SSE events/s |",
        "|---|---|---|---|---|---|",
        *[_row(r) for r in ttft],
        "",
        f"### Capacity: {CAPACITY_STREAMS} streams, shorter ITL",
        "",
        "| client | streams | ITL ms | requests | p50 ms | p99 ms | SSE events/s |",
        "|---|---|---|---|---|---|---|",
        *[_row(r, itl) for itl, r in capacity],
        "",
        f"Highest SSE events/s one client core sustained with p99 TTFT error < "
        f"{P99_LIMIT_MS:g} ms: " + ", ".join(f"{c} {best[c]:,.0f}" for c in CLIENTS) + " "
        "(0: never under the limit; a client is not measured further once it passed it).",
    ]
    write_section("harness", "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
