"""``python -m bench scale``: where precision ends at scale, both ends, side by side in one run.

1. **Bundled server at 1,000 streams** (TTFT 100 ms, ITL 50 ms, 40 tokens): its own
   TTFT error (``x_llmload.ttft_s`` − configured) and CPU per SSE event, one
   process and ``--workers 2``; the client is ``bench.server_timing``'s http1
   asyncio raw-socket loop.
2. **Load generator at 20 / 200 / 1,000 streams on one client core** against the
   reference server (``bench/harness_server.py``, ITL 50 ms): client TTFT − the
   server's stamp of its first-token write (``bench harness``'s child under gevent),
   and SSE events per client CPU-second — the http1 client (``loadtests.transport.http1``, the
   default) and httpx (``--http-client httpx``) interleaved, row by row.
3. **Bursts of 20**: 20 users with a 1 s start-to-start pacing whose requests start
   together every interval (``--first-start together``) or at seeded offsets
   (``spread``, the default), against both servers at TTFT 200 ms / ITL 20 ms:
   client − server TTFT per request.
4. **Distributed**: ``llmload run --workers N`` against the bundled server (one
   process, so its counters are complete): records written vs requests the server
   counted (0 lost), and the master's CPU per record it received from the workers.

One module per experiment — ``server`` (1), ``loadgen`` and ``runpath`` (2),
``bursts`` (3), ``distributed`` (4) — and ``section``, whose ``render`` turns their
rows into the section; ``main`` here runs them in that order.

Every figure comes with the machine line, the calibration and the load average at
start; goals not met on this machine are said so in the section, with the reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from bench.mdsection import load_average, write_section
from bench.scale.bursts import burst_child, burst_rows
from bench.scale.distributed import master_cost
from bench.scale.loadgen import CLIENT_PATHS, client_row
from bench.scale.runpath import run_path
from bench.scale.section import render
from bench.scale.server import server_row


def main(argv: list[str] | None = None) -> int:
    """Run every part, print the section, write it into BENCHMARKS.md."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--burst-child"]:
        print(json.dumps(burst_child(argv[1], argv[2])))
        return 0
    p = argparse.ArgumentParser(prog="python -m bench scale", description=__doc__)
    p.add_argument("--server-streams", default="200,1000")
    p.add_argument("--client-streams", default="20,200,1000")
    p.add_argument("--window", type=float, default=5.0, help="seconds per server row")
    p.add_argument("--run-users", type=int, default=1000, help="llmload run's path (0: skip)")
    p.add_argument("--run-duration", default="30s")
    p.add_argument("--dist-users", type=int, default=400)
    p.add_argument("--dist-workers", type=int, default=2)
    p.add_argument("--dist-duration", default="10s")
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    load = load_average()
    res: dict[str, Any] = {"server": [], "client": [], "burst": []}
    for n in (int(x) for x in args.server_streams.split(",")):
        for workers in (1, 2) if n >= 1000 else (1,):
            res["server"].append(server_row(n, workers, args.window))
            print(json.dumps(res["server"][-1]), flush=True)
    for n in (int(x) for x in args.client_streams.split(",")):
        for client in CLIENT_PATHS:  # interleaved: both paths at one load, one moment
            res["client"].append(client_row(n, client))
    if args.run_users:
        res["run"] = run_path(args.run_users, args.run_duration)
        print(json.dumps(res["run"]), flush=True)
    res["burst"] = burst_rows()
    if args.dist_users:
        res["distributed"] = master_cost(args.dist_users, args.dist_workers, args.dist_duration)
    md = render(res, args, load)
    print(md)
    if not args.no_write:
        write_section("scale", md)
    return 0
