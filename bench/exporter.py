"""``python -m bench exporter``: what the live exporter costs the load generator.

Side by side: two gevent client processes at once, both pinned to CPU 0, each
running N streams with the harness's own request path (``loadtests.transport.target.perform``
+ the timing core, the same loop as ``bench harness``) against the bundled
synthetic server pinned to CPU 1.  *Off*: records go nowhere.  *On*: every
request start and record goes into ``LiveMetrics``, a ``HealthSampler`` ticks,
and the parent scrapes ``/metrics`` every second, as Prometheus would.  Running
the pair at the same moment on the same core is what makes the comparison
fair on a shared machine: whatever else runs there slows both alike.

The server paces the streams (same event rate in both modes, below what
either process saturates at), so the comparison is of CPU per event: capacity
= SSE events per CPU-second of the client process, i.e. the events/s one
saturated core would sustain, measured over a window after a warm-up.  Also: the exporter alone —
microseconds per record into ``LiveMetrics`` and milliseconds per scrape.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

STREAMS, TOKENS, TTFT_MS, ITL_MS = 50, 32, 20, 10
WINDOW_S, WARM_S, REPEATS = 5.0, 1.5, 7
ROOT = Path(__file__).resolve().parent.parent


# -- child: one client process, exporter off or on (gevent-patched) ----------------------------


def _child(mode: str, url: str) -> dict[str, Any]:
    from bench.client import gevent_client

    client = gevent_client(url, TOKENS)  # patches gevent: the imports below come after it
    import gevent

    from llmload.exporter import LiveMetrics
    from llmload.loadtests.measure.timing import RecordMeta, StreamTimer
    from llmload.loadtests.run.health import HealthSampler
    from llmload.loadtests.run.sinks import NullSink
    from llmload.loadtests.transport.target import clock, perform

    adapter, target, call = client.adapter, client.target, client.call
    sink: Any = NullSink()
    sampler = None
    inflight = [0]
    port = None
    if mode == "on":
        sink = LiveMetrics(grace_s=0.0)
        port = sink.start()
        sampler = HealthSampler(lambda s: sink.on_health("local", s), inflight=lambda: inflight[0])
        sampler.start()
    print(json.dumps({"port": port}), flush=True)
    n_req = [0]
    events = [0]
    cpu: dict[str, float] = {}
    start = clock()
    measure_from, end = start + WARM_S, start + WARM_S + WINDOW_S

    def one(sess: Any) -> None:
        n_req[0] += 1
        meta = RecordMeta(str(n_req[0]), "bench", "bench", "stream", adapter.endpoint, time.time())
        sink.on_request_start("stream", "bench", adapter.endpoint)
        inflight[0] += 1
        t0 = clock()
        timer = StreamTimer(adapter, t0)
        perform(sess, target, call, timer)
        rec = timer.finish(clock(), meta)
        inflight[0] -= 1
        sink.on_record(rec)
        if measure_from <= clock() < end:
            events[0] += len(rec.itl_s) + 1

    def worker() -> None:
        sess = target.user_client()  # the default HTTP path (loadtests.transport.http1)
        while clock() < end:
            one(sess)

    def mark(name: str, at: float) -> None:
        gevent.sleep(max(0.0, at - clock()))
        cpu[name] = time.process_time()

    greenlets = [gevent.spawn(worker) for _ in range(STREAMS)]
    gevent.joinall([gevent.spawn(mark, "from", measure_from), gevent.spawn(mark, "to", end)])
    gevent.joinall(greenlets)
    if sampler is not None:
        sampler.stop()
    cpu_s = cpu["to"] - cpu["from"]
    return {
        "mode": mode,
        "events": events[0],
        "cpu_s": cpu_s,
        "events_per_cpu_s": events[0] / cpu_s,
        "events_per_s": events[0] / WINDOW_S,
        "scrapes": sink.scrapes if mode == "on" else 0,
    }


# -- parent ------------------------------------------------------------------------------------


def _measure_pair(url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Exporter off and on in two client processes at once, sharing CPU 0: same conditions."""
    procs = {
        mode: subprocess.Popen(
            [sys.executable, "-m", "bench.exporter", "--child", mode, url],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for mode in ("off", "on")
    }
    stop = threading.Event()
    scraper = None
    results: dict[str, dict[str, Any]] = {}
    try:
        for proc in procs.values():
            assert proc.stdout is not None
            port = json.loads(proc.stdout.readline() or "{}").get("port")
            if port:
                scraper = threading.Thread(target=_scrape_every_second, args=(port, stop))
                scraper.start()
        for mode, proc in procs.items():
            out, err = proc.communicate(timeout=120)
            if proc.returncode != 0 or not out.strip():
                raise RuntimeError(f"bench child ({mode}) failed: {err.strip()[-500:]}")
            results[mode] = dict(json.loads(out.strip().splitlines()[-1]))
    finally:
        stop.set()
        if scraper is not None:
            scraper.join(5)
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    return results["off"], results["on"]


def _scrape_every_second(port: int, stop: threading.Event) -> None:
    import httpx

    while not stop.wait(1.0):
        try:
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        except httpx.TransportError:
            return


def _exporter_alone() -> dict[str, float]:
    """µs per record (start + a 32-token stream record), ms per scrape of 8 label sets."""
    from llmload.exporter import LiveMetrics
    from llmload.loadtests.measure.record import RequestRecord

    m = LiveMetrics()
    itl = [0.005 + i * 1e-5 for i in range(TOKENS - 1)]
    records = [
        RequestRecord(
            str(i),
            "b",
            f"s{i % 4}",
            ("stream", "sync")[i % 2],
            "/v1/chat",
            0.0,
            "ok",
            ttft_s=0.02 + i % 7 / 100,
            e2e_s=0.2,
            tpot_s=0.005,
            itl_s=itl,
            output_tokens=TOKENS,
        )
        for i in range(20_000)
    ]
    t0 = time.perf_counter()
    for r in records:
        m.on_request_start(r.mode, r.scenario, r.endpoint)
        m.on_record(r)
    per_record = (time.perf_counter() - t0) / len(records)
    t0 = time.perf_counter()
    for _ in range(200):
        size = len(m.render())  # the /metrics body, as served
    per_scrape = (time.perf_counter() - t0) / 200
    return {"us_per_record": per_record * 1e6, "ms_per_scrape": per_scrape * 1e3, "bytes": size}


def main(argv: list[str] | None = None) -> int:
    """Run off/on side by side and write BENCHMARKS.md's ``exporter`` section."""
    argv = list(argv or [])
    if argv[:1] == ["--child"]:
        print(json.dumps(_child(argv[1], argv[2])), flush=True)
        return 0
    if argv[:1] == ["--alone"]:
        from gevent import monkey

        monkey.patch_all()  # locust's world: prometheus_client's locks become gevent's
        print(json.dumps(_exporter_alone()), flush=True)
        return 0
    from bench.mdsection import load_note, machine, write_section

    sys.path.insert(0, str(ROOT))
    from bench.procs import start_server_process

    if (os.cpu_count() or 1) < 2:
        print("exporter bench needs 2 CPUs (client and server pinned apart)", file=sys.stderr)
        return 1
    load = os.getloadavg()[0]
    cmd = [sys.executable, "-m", "bench.exporter", "--alone"]
    alone = json.loads(subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True).stdout)
    server = start_server_process(
        "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--log-level", "warning"
    )
    os.sched_setaffinity(server.proc.pid, {1})
    runs: list[dict[str, Any]] = []
    try:
        for _ in range(REPEATS):
            off, on = _measure_pair(server.url)
            runs += [off, on]
            print(json.dumps(off), json.dumps(on), sep="\n", flush=True)
    finally:
        server.stop()
    med = {
        mode: statistics.median(r["events_per_cpu_s"] for r in runs if r["mode"] == mode)
        for mode in ("off", "on")
    }
    pairs = [
        on["events_per_cpu_s"] / off["events_per_cpu_s"]
        for off, on in zip(runs[0::2], runs[1::2], strict=True)
    ]
    ratio = statistics.median(pairs)
    per_request_us = TOKENS / med["off"] * 1e6
    scrape_share = statistics.median(
        r["scrapes"] * alone["ms_per_scrape"] / 1000 / r["cpu_s"] for r in runs if r["mode"] == "on"
    )
    rows = [
        f"| {i // 2 + 1} | {r['mode']} | {r['events']:,} | {r['cpu_s']:.2f} | "
        f"{r['events_per_cpu_s']:,.0f} | {r['events_per_s']:,.0f} | {r['scrapes']} |"
        for i, r in enumerate(runs)
    ]
    lines = [
        "## Exporter overhead on the load generator",
        "",
        f"`python -m bench exporter` on {machine()}; {load_note(load)}.",
        f"Two gevent client processes at once, both pinned to CPU 0 (one with the exporter "
        f"off, one on), each run {STREAMS} streams with the harness's request path (httpx + "
        f"timing core) against the bundled synthetic server pinned to CPU 1 (TTFT {TTFT_MS} ms, "
        f"ITL {ITL_MS} ms, {TOKENS} tokens); {WINDOW_S:g} s measured after {WARM_S:g} s "
        f"warm-up, {REPEATS} pairs. *On*: "
        "every start and record into `LiveMetrics`, `HealthSampler` running, `/metrics` "
        "scraped every second. The server paces the streams (same event rate both ways); "
        "capacity = SSE events per CPU-second of the client process (the events/s one "
        "saturated core would sustain).",
        "",
        "| pair | exporter | events | client CPU s | events per CPU-s | events/s (wall) "
        "| scrapes |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"**Median capacity: off {med['off']:,.0f}, on {med['on']:,.0f} events per CPU-second "
        f"— median of the pairs' on/off ratios {ratio:.3f}** (the exporter costs "
        f"{(1 - ratio) * 100:.1f} % of the client's capacity; both sides of a "
        "pair run at once, so whatever else runs on the machine hits them alike; pair ratios "
        + ", ".join(f"{p:.2f}" for p in pairs)
        + ").",
        "",
        f"The exporter alone (gevent-patched, no network): {alone['us_per_record']:.1f} µs per "
        f"request (start + a {TOKENS}-token record: {TOKENS - 1} ITL observations, 5 histograms, "
        f"2 counters); one scrape of 8 label sets ({alone['bytes'] / 1024:.0f} KiB) "
        f"{alone['ms_per_scrape']:.2f} ms. Against the client's own "
        f"{per_request_us:,.0f} µs of CPU per {TOKENS}-event request (off), the per-request "
        f"part is {alone['us_per_record'] / per_request_us * 100:.1f} %; the scrapes, a fixed "
        f"~{alone['ms_per_scrape']:.0f} ms each per second, are {scrape_share * 100:.1f} % of "
        "the client CPU these runs used (a fixed cost: a smaller share the busier the client); "
        "the sampler and the noise make up the rest. In a distributed run the per-request "
        "figure is the master's cost per forwarded record.",
    ]
    write_section("exporter", "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
