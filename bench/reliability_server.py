"""Server-side rows of RELIABILITY.md: bad bodies, huge bodies, readers that never read,
mass disconnects, overload.  Same drivers as ``tests/integration/test_reliability_server.py``.
"""

from __future__ import annotations

import json
from collections import Counter

import httpx
import psutil

from bench.reliability_cases import SRV, SRV_INPROC, Row, server_started


def random_bodies(examples: int) -> Row:
    """Hypothesis-generated bodies on both endpoints: never a 5xx, always an OpenAI error."""
    from hypothesis import HealthCheck, given, settings

    from bench.bad_bodies import request_bodies, send_checked

    server = server_started(ttft_ms=0, itl_ms=0)
    statuses: Counter[int] = Counter()
    problems: list[str] = []
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:

            @settings(
                max_examples=examples,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(request=request_bodies())
            def send(request: tuple[str, str, bytes]) -> None:
                status, found = send_checked(http, *request)
                statuses[status] += 1
                problems.extend(found)

            send()
            alive = http.get("/health").status_code == 200
        sent = sum(statuses.values())
        idle = server.state.admission.running == 0 and server.engine.running() == 0
        lost = abs(sent - server.total_requests())
    finally:
        server.stop()
    spread = ", ".join(f"{n}× {s}" for s, n in sorted(statuses.items()))
    return Row(
        "random JSON bodies / field types / values (hypothesis), both endpoints",
        sent,
        sent,
        alive and idle and not problems,
        lost,
        f"{spread}; invalid answers: {len(problems)}",
        f"{SRV_INPROC}: `--ttft-ms 0 --itl-ms 0` + hypothesis `request_bodies()`",
    )


def oversized(rounds: int) -> Row:
    """Bodies over 4 MiB: declared, absurdly declared, streamed without Content-Length."""
    from bench.server_abuse import oversized as send_oversized
    from llmload.target_server.settings import MAX_BODY_BYTES

    server = server_started(ttft_ms=0, itl_ms=0)
    answers: Counter[str] = Counter()
    try:
        for _ in range(rounds):
            for case, (status, _body) in send_oversized(server.url, MAX_BODY_BYTES).items():
                answers[f"{case} → {status}"] += 1
        alive = httpx.get(server.url + "/health").status_code == 200
    finally:
        server.stop()
    expected = {"declared → 413", "streamed, no Content-Length → 413", "declared absurd → 400"}
    return Row(
        "oversized bodies (> 4 MiB)",
        sum(answers.values()),
        sum(answers.values()),
        alive and set(answers) == expected,
        0,
        "; ".join(f"{n}× {k}" for k, n in sorted(answers.items()))
        + " (the absurd Content-Length is refused by the HTTP parser: an OpenAI error object)",
        f"{SRV_INPROC} + raw sockets / chunked upload",
    )


def slow_readers(n: int) -> Row:
    """Clients that never read a 400k-token stream: bounded, timed out, slot freed."""
    from bench.server_abuse import dechunk, open_streams, read_to_eof, wait_until

    tokens = 400_000
    server = server_started(
        ttft_ms=0, itl_ms=0, request_timeout=2.0, max_output_tokens=tokens, max_context=2 * tokens
    )
    sizes: list[int] = []
    try:
        streams = open_streams(server.url, n, tokens, rcvbuf=4096)
        held = server.state.admission.running
        freed = wait_until(lambda: server.state.admission.running == 0, 10)
        stopped = wait_until(lambda: server.engine.running() == 0, 5)
        timed_out = 0
        for sock, first in streams:
            _head, body = dechunk(first + read_to_eof(sock, already=first))
            sizes.append(len(body))
            last = [e for e in body.split(b"\n\n") if e.strip()][-1]
            timed_out += json.loads(last[len(b"data: ") :])["error"]["code"] == "timeout"
            sock.close()
    finally:
        server.stop()
    return Row(
        f"{n} clients that never read a {tokens:,}-token stream (`--request-timeout 2`)",
        n,
        n,
        held == n and freed and stopped and timed_out == n,
        0,
        f"slots freed: {freed}, generations stopped: {stopped}; buffered per client before the "
        f"timeout event: max {max(sizes) / 2**20:.1f} MiB of {tokens * 150 / 2**20:.0f} MiB",
        f"{SRV_INPROC}: `--ttft-ms 0 --itl-ms 0 --request-timeout 2` + raw sockets, SO_RCVBUF 4096",
    )


def mass_disconnect(n: int, rounds: int) -> Row:
    """``n`` clients mid-stream drop at once (half RST, half FIN), ``rounds`` times."""
    from bench.server_abuse import close_abruptly, open_streams, wait_until

    server = server_started(ttft_ms=10, itl_ms=20)
    clean = 0
    try:
        for _ in range(rounds):
            socks = [s for s, _ in open_streams(server.url, n, max_tokens=1000)]
            for i, sock in enumerate(socks):
                close_abruptly(sock) if i % 2 else sock.close()
            clean += wait_until(
                lambda: server.state.admission.running == 0 and server.engine.running() == 0, 10
            )
        counted = server.metric(
            "llmserve_requests_total",
            endpoint="/v1/chat/completions",
            stream="true",
            status="cancelled",
        )
    finally:
        server.stop()
    return Row(
        f"{n} clients leave mid-stream at once (half RST, half FIN)",
        rounds,
        n * rounds,
        clean == rounds,
        abs(n * rounds - int(counted)),
        f"running gauge and engine back to 0 in {clean}/{rounds} rounds; "
        f"{int(counted)} counted `cancelled`",
        f"{SRV_INPROC}: `--ttft-ms 10 --itl-ms 20` + raw sockets",
    )


def overload_case(seconds: float) -> Row:
    """40 clients against ``--max-concurrency 4 --max-queue 4`` (10×)."""
    from bench.faults import server_statuses
    from bench.procs import start_server_process
    from bench.server_abuse import overload
    from llmload.loadtests.percentile import percentile_of as percentile

    args = ("--ttft-ms", "50", "--itl-ms", "10", "--max-concurrency", "4", "--max-queue", "4")
    with start_server_process(*args, "--log-level", "warning") as server:
        proc = psutil.Process(server.proc.pid)
        warm = overload(server.url, 40, 1.0, 16)
        rss0 = proc.memory_info().rss
        got = overload(server.url, 40, seconds, 16)
        rss1 = proc.memory_info().rss
        counted = server_statuses(server.url)
    sent = len(warm.admitted) + len(warm.rejected) + len(got.admitted) + len(got.rejected)
    ok = not got.other and not got.bad_429 and got.retry_after == {"1"}
    return Row(
        "overload: 40 clients vs `--max-concurrency 4 --max-queue 4` (10×)",
        len(got.rejected),
        sent,
        ok and rss1 - rss0 < 32 * 2**20,
        abs(sent - sum(counted.values())),
        f"{len(got.rejected)} × 429 (Retry-After 1) in p95 "
        f"{percentile(got.rejected, 95) * 1000:.0f} ms; {len(got.admitted)} admitted, e2e p95 "
        f"{percentile(got.admitted, 95) * 1000:.0f} ms (0.2 s alone); server RSS "
        f"{rss0 / 2**20:.0f} → {rss1 / 2**20:.0f} MiB over {seconds:g} s",
        f"`{SRV} {' '.join(args)}` + 40 httpx clients, 0.2 s back-off after a 429",
    )
