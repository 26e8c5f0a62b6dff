"""Overload: 10x ``--max-concurrency`` clients against the real server process.

The excess is turned away at once (429 + Retry-After, an OpenAI error object),
admitted requests keep a latency bounded by the queue, memory stays flat and
the gauges return to zero.  Bounds are generous: the machine is shared.
"""

from __future__ import annotations

import psutil

from bench.faults import gauge, server_statuses
from bench.server_abuse import overload
from llmload.loadtests.percentile import percentile_of

CONCURRENCY, QUEUE = 4, 4
TTFT_MS, ITL_MS, TOKENS = 50, 10, 16
SERVICE_S = (TTFT_MS + (TOKENS - 1) * ITL_MS) / 1000  # one request alone: 0.2 s


def test_ten_times_the_concurrency_limit(start_server_proc) -> None:
    server = start_server_proc(
        *("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--log-level", "warning"),
        *("--max-concurrency", str(CONCURRENCY), "--max-queue", str(QUEUE)),
    )
    proc = psutil.Process(server.proc.pid)
    warm = overload(server.url, 10 * CONCURRENCY, 1.0, TOKENS)  # first allocations happen here
    rss_before = proc.memory_info().rss
    got = overload(server.url, 10 * CONCURRENCY, 4.0, TOKENS)
    rss_after = proc.memory_info().rss

    assert not got.other and not got.bad_429, (got.other[:3], got.bad_429[:3])
    assert len(got.rejected) > len(got.admitted) > 10
    assert got.retry_after == {"1"}
    # rejections are immediate; admitted requests wait at most for the queue ahead of them
    assert (percentile_of(got.rejected, 95) or 0) < 0.5, sorted(got.rejected)[-5:]
    worst_admitted = (QUEUE // CONCURRENCY + 1) * SERVICE_S
    assert (percentile_of(got.admitted, 50) or 0) < 3 * worst_admitted
    assert max(got.admitted) < 3.0, sorted(got.admitted)[-5:]
    # memory flat: a few hundred requests later the server holds no more than before
    assert rss_after - rss_before < 32 * 2**20, (rss_before, rss_after)
    # the server counted what the clients saw, and nothing is left running or queued
    counts = server_statuses(server.url)
    assert counts["ok"] == len(warm.admitted) + len(got.admitted)
    assert counts["rejected"] == len(warm.rejected) + len(got.rejected)
    assert set(counts) == {"ok", "rejected"}
    assert gauge(server.url, "llmserve_requests_running") == 0
    assert gauge(server.url, "llmserve_requests_waiting") == 0
