"""``python -m bench harness``: how exact is the load generator, per HTTP client, per core?

Clients compared, each in a child process pinned to CPU 0 running N concurrent
streams under gevent: ``http1`` (the harness's own path, ``loadtests.transport.target.perform``
with ``loadtests.transport.http1``, + the timing core), ``httpx`` (the same through httpx,
``--http-client httpx``), locust's ``HttpSession`` (requests, ``iter_content(None)``)
and ``FastHttpSession`` (geventhttpclient, ``iter_content(1024)`` as locust's own
``iter_lines`` reads).  The server is pinned to CPU 1.

1. TTFT error = client TTFT − the bundled synthetic server's recorded TTFT
   (``x_llmload``), at 20, 200 and 1000 streams: what a user of ``make
   loadtest`` sees, server overhead included.
2. The same against ``bench.harness_server``, a minimal server that reports the
   time from the client's ``t0`` to its write of the first token (one
   monotonic clock for both processes): the client's own error.
3. Capacity: 200 streams against the reference server with shorter and shorter
   inter-token latencies; the highest SSE events/s a client sustained on its
   one core with p99 error under 5 ms.
4. A server that closes the connection after each response (``--close``, its
   own section ``harness-close``): client TTFT − the server's own TTFT (from
   the request's arrival, as vLLM or any server measures it) at 1, 5 and 20
   streams, with ``loadtests.transport.connect`` (``httpx``) and with httpcore's default
   connect (``httpx-plain``), keep-alive beside it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from math import nan
from pathlib import Path
from typing import Any

from llmload.loadtests.percentile import percentile_of
from llmload.target_server.launch import launch

CLIENTS = ("http1", "httpx", "HttpSession", "FastHttpSession")
STREAMS = (20, 200, 1000)
CAPACITY_ITL_MS = (100, 50, 20, 10, 5)
#: FastHttpSession's error is hundreds of ms at every rate (it holds events until ~1 KB)
CAPACITY_CLIENTS = ("http1", "httpx", "HttpSession")
CAPACITY_STREAMS = 200
TTFT_MS, ITL_MS, TOKENS = 100, 100, 16
WINDOW_S, WARM_S = 3.0, 2.0
P99_LIMIT_MS = 5.0
#: section 4: the issue's server (200 ms first token), short answers, reconnecting users
CLOSE_TTFT_MS, CLOSE_ITL_MS, CLOSE_STREAMS = 200, 20, (1, 5, 20)
CLOSE_CLIENTS = ("http1", "httpx", "httpx-plain")
#: measured seconds per row: a 1-stream row needs enough requests for a p95
CLOSE_WINDOW_S = 10.0
ROOT = Path(__file__).resolve().parent.parent


# -- child: one client, one concurrency level (a gevent-patched process) ---------------------


def _child(
    client: str,
    url: str,
    streams: int,
    itl_ms: int,
    ttft_ms: int = TTFT_MS,
    window: float = WINDOW_S,
    together: bool = False,
) -> dict[str, Any]:
    from bench.client import gevent_client

    setup = gevent_client(url, TOKENS)  # patches gevent: the imports below come after it
    import gevent

    from llmload.loadtests.measure.timing import RecordMeta, StreamTimer
    from llmload.loadtests.transport.target import clock, perform

    adapter, target, call = setup.adapter, setup.target, setup.call
    meta = RecordMeta("x", "bench", "bench", "stream", adapter.endpoint, 0.0)

    def session() -> Any:
        if client == "http1":  # llmload's default: loadtests.transport.http1
            return target.user_client()
        if client == "httpx":
            return target.httpx_client()
        if client == "httpx-plain":  # httpcore's own connect: a resolver call per connection
            import httpcore
            import httpx

            class Timed(httpcore.SyncBackend):
                """httpcore's backend, its connect timed for the records' ``connect_s``."""

                def connect_tcp(self, *args: Any, **kwargs: Any) -> Any:
                    began = time.perf_counter()
                    stream = super().connect_tcp(*args, **kwargs)
                    stream.connect_s = time.perf_counter() - began  # type: ignore[attr-defined]  # a probe attribute on the stream object, read back by the bench
                    return stream

            transport = httpx.HTTPTransport(trust_env=False)
            transport._pool = httpcore.ConnectionPool(
                max_connections=4, max_keepalive_connections=1, network_backend=Timed()
            )
            return httpx.Client(
                base_url=url,
                trust_env=False,
                transport=transport,
                timeout=httpx.Timeout(120, connect=10),
            )
        from locust.env import Environment

        env = Environment()
        if client == "HttpSession":
            from locust.clients import HttpSession

            return HttpSession(base_url=url, request_event=env.events.request, user=None)
        from locust.contrib.fasthttp import FastHttpSession

        return FastHttpSession(base_url=url, request_event=env.events.request, user=None)

    def one(sess: Any) -> Any:
        t0 = clock()
        this = dataclasses.replace(call, headers={**call.headers, "x-bench-t0": repr(t0)})
        timer = StreamTimer(adapter, t0)
        if client.startswith("httpx") or client == "http1":
            perform(sess, target, this, timer)
        else:
            resp = sess.post(this.path, json=this.json, headers=this.headers, stream=True)
            timer.headers(clock(), resp.status_code)
            chunks = (
                resp.iter_content(chunk_size=None)
                if client == "HttpSession"
                else resp.iter_content(chunk_size=1024, decode_content=False)
            )
            for chunk in chunks:
                timer.feed(chunk, clock())
        return timer.finish(clock(), meta)

    errors: list[float] = []
    own: list[float] = []  # client TTFT - the server's own TTFT (from the request's arrival)
    connects: list[float] = []  # set-up of the connections requests opened
    events = [0]
    start = clock()
    measure_from, end = start + WARM_S, start + WARM_S + window

    # staggered starts: streams that began together would stay in lock-step, every event
    # of every stream arriving in one burst; spread them over one request's duration.
    # ``together``: that lock-step on purpose (``--first-start together``'s case)
    spread = 0.0 if together else (ttft_ms + TOKENS * itl_ms) / 1000

    def worker(i: int) -> None:
        gevent.sleep(spread * i / streams)
        sess = session()
        one(sess)  # warm: connection and first-request costs are not the target's
        while clock() < end:
            began = clock()
            rec = one(sess)
            if began >= measure_from and rec.ok and rec.ttft_s and rec.server_ttft_s:
                errors.append((rec.ttft_s - rec.server_ttft_s) * 1000)
                events[0] += len(rec.itl_s) + 1
                if rec.server_queue_s is not None:
                    own.append((rec.ttft_s - rec.server_ttft_s + rec.server_queue_s) * 1000)
                if rec.connect_s is not None:
                    connects.append(rec.connect_s * 1000)

    from llmload.common import gcpolicy

    gcpolicy.settle()  # as llmload run does before its first phase
    cpu0 = time.process_time()
    gevent.joinall([gevent.spawn(worker, i) for i in range(streams)])
    wall = clock() - start
    return {
        "client": client,
        "streams": streams,
        "together": together,
        "requests": len(errors),
        # ``or [nan]``: an empty sample reads nan, not None (a table cell, a failed goal)
        "p50_ms": percentile_of(errors or [nan], 50),
        "p95_ms": percentile_of(errors or [nan], 95),
        "p99_ms": percentile_of(errors or [nan], 99),
        "own_p50_ms": percentile_of(own or [nan], 50),
        "own_p95_ms": percentile_of(own or [nan], 95),
        "connect_p50_ms": percentile_of(connects or [nan], 50),
        "events_per_s": events[0] / window,
        "client_cpu": 100 * (time.process_time() - cpu0) / wall,
    }


# -- parent --------------------------------------------------------------------------------


def _start(module: str, args: list[str]) -> tuple[subprocess.Popen[str], str]:
    """The server on CPU 1 (the one launcher: ``target_server.launch``)."""
    server = launch(args, module=module, cwd=ROOT, loopback=False, health=False)
    os.sched_setaffinity(server.proc.pid, {1})
    time.sleep(0.5)
    return server.proc, server.url


def _bundled(itl_ms: int) -> tuple[subprocess.Popen[str], str]:
    args = ["--port", "0", "--engine", "synthetic", "--log-level", "warning"]
    args += ["--ttft-ms", str(TTFT_MS), "--itl-ms", str(itl_ms)]
    return _start("llmload.target_server", args)


def _reference(
    itl_ms: int, ttft_ms: int = TTFT_MS, close: bool = False
) -> tuple[subprocess.Popen[str], str]:
    args = [str(ttft_ms), str(itl_ms)] + (["close"] if close else [])
    return _start("bench.harness_server", args)


def _measure(
    client: str,
    server: subprocess.Popen[str],
    url: str,
    streams: int,
    itl_ms: int,
    ttft_ms: int = TTFT_MS,
    window: float = WINDOW_S,
    together: bool = False,
) -> dict:
    import psutil

    proc = psutil.Process(server.pid)
    cpu0, t0 = sum(proc.cpu_times()[:2]), time.monotonic()
    cmd = [sys.executable, "-m", "bench.harness", "--child", client, url, str(streams)]
    cmd += [str(itl_ms), str(ttft_ms), str(window)] + (["together"] if together else [])
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    server_cpu = 100 * (sum(proc.cpu_times()[:2]) - cpu0) / (time.monotonic() - t0)
    if out.returncode != 0:
        return {"client": client, "streams": streams, "error": out.stderr.strip()[-300:]}
    result: dict = json.loads(out.stdout.strip().splitlines()[-1])
    result["server_cpu"] = server_cpu
    print(json.dumps(result), flush=True)
    return result


def _per_cpu(r: dict[str, Any]) -> float:
    """SSE events per second of client CPU: capacity per core, whatever share it was given."""
    return r["events_per_s"] / max(r["client_cpu"] / 100, 1e-9)


def _row(r: dict[str, Any], itl: int | None = None) -> str:
    lead = f"| {r['client']} | {r['streams']} |" + (f" {itl} |" if itl is not None else "")
    if "error" in r:
        return lead + f" failed: {r['error'][-80:]} | | | | | | |"
    return lead + (
        f" {r['requests']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['events_per_s']:,.0f}"
        f" | {r['client_cpu']:.0f} % | {_per_cpu(r):,.0f} | {r['server_cpu']:.0f} % |"
    )


def _sweep(start: Any, itl: int) -> list[dict]:
    server, url = start(itl)
    try:
        return [_measure(c, server, url, n, itl) for c in CLIENTS for n in STREAMS]
    finally:
        server.terminate()
        server.wait(10)


def _capacity() -> tuple[list[tuple[int, dict]], dict[str, float]]:
    rows: list[tuple[int, dict]] = []
    best = dict.fromkeys(CAPACITY_CLIENTS, 0.0)
    for itl in CAPACITY_ITL_MS:
        server, url = _reference(itl)
        try:
            for client in CAPACITY_CLIENTS:
                r = _measure(client, server, url, CAPACITY_STREAMS, itl)
                rows.append((itl, r))
                if r.get("p99_ms", float("inf")) < P99_LIMIT_MS:
                    best[client] = max(best[client], r["events_per_s"])
        finally:
            server.terminate()
            server.wait(10)
    return rows, best


HEADER = (
    "| client | streams | requests | p50 ms | p99 ms | SSE events/s | client CPU "
    "| events per client CPU-s | server CPU |"
)
RULE = "|---|---|---|---|---|---|---|---|---|"


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and write BENCHMARKS.md's ``harness`` section."""
    argv = list(argv or [])
    if argv[:1] == ["--child"]:
        ttft = int(argv[5]) if len(argv) > 5 else TTFT_MS
        window = float(argv[6]) if len(argv) > 6 else WINDOW_S
        together = argv[7:8] == ["together"]
        print(
            json.dumps(_child(argv[1], argv[2], int(argv[3]), int(argv[4]), ttft, window, together))
        )
        return 0
    from bench.mdsection import load_note, machine, write_section

    if "--close" in argv:
        write_section("harness-close", _close_section(machine(), load_note))
        return 0

    if (os.cpu_count() or 1) < 2:
        print("bench harness needs 2 CPUs (client and server pinned apart)", file=sys.stderr)
        return 1
    load = os.getloadavg()[0]
    bundled = _sweep(_bundled, ITL_MS)
    reference = _sweep(_reference, ITL_MS)
    capacity, best = _capacity()
    lines = [
        "## Harness accuracy and capacity per HTTP client",
        "",
        f"`python -m bench harness` on {machine()}; {load_note(load)}.",
        f"Client: one process pinned to CPU 0 (gevent); server pinned to CPU 1. Each stream sends "
        f"back-to-back requests of {TOKENS} tokens (server TTFT {TTFT_MS} ms); {WINDOW_S:g} s "
        f"measured after {WARM_S:g} s of warm-up, stream starts spread over one request's "
        "duration (streams started together stay in lock-step and their events arrive in "
        "bursts). Errors in ms; CPU = share of one core.",
        "",
        f"### 1. Client TTFT − the bundled server's recorded TTFT (ITL {ITL_MS} ms)",
        "",
        "Includes the bundled server's own overhead before its clock starts and after it stops "
        "(a busy server core shows as error here).",
        "",
        HEADER,
        RULE,
        *[_row(r) for r in bundled],
        "",
        f"### 2. Client-only error: against the reference server (ITL {ITL_MS} ms)",
        "",
        "`bench/harness_server.py` reports the time from the client's `t0` to its write of the "
        "first token, so the difference is transport plus the client's own reading delay.",
        "",
        HEADER,
        RULE,
        *[_row(r) for r in reference],
        "",
        f"### 3. Capacity: {CAPACITY_STREAMS} streams against the reference server, shorter ITL",
        "",
        HEADER.replace("| streams |", "| streams | ITL ms |"),
        RULE + "---|",
        *[_row(r, itl) for itl, r in capacity],
        "",
        f"Highest SSE events/s one client core sustained with p99 error < {P99_LIMIT_MS:g} ms: "
        + ", ".join(f"{c} {best[c]:,.0f}" for c in CAPACITY_CLIENTS)
        + " (0: never under the limit; FastHttpSession is not swept: its error is hundreds of "
        "ms at any rate). On a shared machine one scheduling hiccup decides a p99, so the "
        "steadier capacity figure is events per client CPU-second at 1000 streams (section 2), "
        "i.e. what one whole core would carry: "
        + ", ".join(
            f"{r['client']} {_per_cpu(r):,.0f}"
            for r in reference
            if r["streams"] == 1000 and "error" not in r
        )
        + ". When the client CPU column is far below 100 % while errors grow, the client was "
        "starved by other jobs on the machine, not saturated by the work.",
    ]
    write_section("harness", "\n".join(lines))
    write_section("harness-close", _close_section(machine(), load_note))
    return 0


def _close_rows() -> list[dict]:
    """Every row, the closing and the keep-alive server's interleaved (one load, one moment)."""
    closing = _reference(CLOSE_ITL_MS, CLOSE_TTFT_MS, close=True)
    keeping = _reference(CLOSE_ITL_MS, CLOSE_TTFT_MS)
    top = max(CLOSE_STREAMS)
    runs = [(n, c, False) for n in CLOSE_STREAMS for c in CLOSE_CLIENTS]
    runs += [(top, c, True) for c in CLOSE_CLIENTS]  # the top row again, users in lock-step
    runs += [(n, "keep-alive", t) for n, c, t in runs if c == CLOSE_CLIENTS[0]]
    runs.sort(key=lambda r: (r[0], r[2]))  # each keep-alive row right after its close rows
    try:
        rows = []
        for n, client, together in runs:
            close = client != "keep-alive"
            server, url = closing if close else keeping
            c = client if close else CLOSE_CLIENTS[0]
            r = _measure(c, server, url, n, CLOSE_ITL_MS, CLOSE_TTFT_MS, CLOSE_WINDOW_S, together)
            rows.append({**r, "close": close})
        return sorted(rows, key=lambda r: not r["close"])  # close rows first, order kept
    finally:
        for server, _url in (closing, keeping):
            server.terminate()
            server.wait(10)


def _close_section(where: str, load_note: Any) -> str:
    """Section 4: a server that closes the connection after each response."""
    load = os.getloadavg()[0]
    rows = _close_rows()
    head = (
        "| connection | client | streams | first starts | requests | − server's own TTFT p50 "
        "| p95 | − first write p50 | p95 | connect p50 | client CPU |"
    )
    table = [head, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        conn = "close" if r["close"] else "keep-alive"
        starts = "together" if r.get("together") else "spread"
        if "error" in r:
            table.append(
                f"| {conn} | {r['client']} | {r['streams']} | {starts} "
                f"| failed: {r['error'][-80:]} | | | | | | |"
            )
            continue
        table.append(
            f"| {conn} | {r['client']} | {r['streams']} | {starts} | {r['requests']} "
            f"| {r['own_p50_ms']:.1f} | {r['own_p95_ms']:.1f} | {r['p50_ms']:.1f} "
            f"| {r['p95_ms']:.1f} | {r['connect_p50_ms']:.2f} | {r['client_cpu']:.0f} % |"
        )
    return "\n".join(
        [
            "## A server that closes the connection after each response",
            "",
            f"`python -m bench harness --close` on {where}; {load_note(load)}.",
            f"`bench/harness_server.py close`: HTTP/1.0-style answers (`Connection: close`, "
            f"close-delimited body, one request per connection), first token after exactly "
            f"{CLOSE_TTFT_MS} ms, then {TOKENS} tokens {CLOSE_ITL_MS} ms apart. Client pinned to "
            "CPU 0 (gevent), server to CPU 1; back-to-back requests per stream; first starts "
            "`spread` over one request, or `together` (every user at once, so they stay in "
            "lock-step: all 20 reconnect and read their first token at the same instant — "
            f"`--first-start together`'s case); {CLOSE_WINDOW_S:g} s measured per row after "
            f"{WARM_S:g} s. "
            "Errors in ms: client TTFT minus the server's own TTFT (request read -> "
            "first token written: what a server's metrics report, so connection set-up and the "
            "request's write count as harness error), and minus the time from `t0` to the first "
            "write (transport + reading only). `http1` is llmload's path "
            "(`loadtests.transport.http1`, connecting through `loadtests.transport.connect`: "
            "no resolver call per connection, the request "
            "in one send); `httpx` is `--http-client httpx` (the same connector under httpcore); "
            "`httpx-plain` is httpx with httpcore's default connect. `connect p50`: the set-up "
            "of the connections "
            "requests opened (`connect_s`, inside both errors; nan: none opened). Keep-alive rows: "
            "the same server keeping connections, each measured right after the close rows of its "
            "streams and starts.",
            "",
            *table,
            "",
            _close_verdict(rows),
        ]
    )


def _close_verdict(rows: list[dict]) -> str:
    """One sentence: the 20-stream figures against the goal (<= 1 ms p50, <= 3 ms p95)."""
    top, lowest = max(CLOSE_STREAMS), min(CLOSE_STREAMS)

    def row(client: str, close: bool, together: bool = False, n: int = top) -> dict | None:
        return next(
            (
                r
                for r in rows
                if r.get("client") == client
                and r.get("close") == close
                and r.get("streams") == n
                and bool(r.get("together")) == together
                and "error" not in r
            ),
            None,
        )

    def fig(client: str, close: bool, together: bool = False) -> str:
        r = row(client, close, together)
        return "n/a" if r is None else f"+{r['own_p50_ms']:.1f} / +{r['own_p95_ms']:.1f} ms"

    lead = CLOSE_CLIENTS[0]
    ours = [r for r in (row(lead, True), row(lead, True, True)) if r is not None]
    met = bool(ours) and all(r["own_p50_ms"] <= 1.0 and r["own_p95_ms"] <= 3.0 for r in ours)
    floor = row(lead, False, n=lowest)
    return (
        f"At {top} streams, client TTFT above the server's own (p50 / p95): llmload "
        f"({lead}) {fig(lead, True)} against the closing server with starts spread, "
        f"{fig(lead, True, True)} with users together — goal (≤ 1 / ≤ 3 ms) "
        f"**{'met' if met else 'not met'}** here; through httpx {fig('httpx', True)} / "
        f"{fig('httpx', True, True)}; httpcore's default connect "
        f"{fig('httpx-plain', True)} / {fig('httpx-plain', True, True)}; keep-alive "
        f"{fig(lead, False)} / {fig(lead, False, True)} — measured side by side in one "
        "run. The floor to compare with: one stream on a kept-alive connection, "
        + (
            "n/a"
            if floor is None
            else f"+{floor['own_p50_ms']:.1f} / +{floor['own_p95_ms']:.1f} ms"
        )
        + " (the two processes waking, and waiting for a CPU on a loaded machine: the "
        "scheduler's delays land in every row alike, see the load average above)."
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
