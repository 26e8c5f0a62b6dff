"""The server's side of a report from recorded-shape ``/metrics`` texts (no sockets).

The vLLM, SGLang and TGI fixtures hold a "before" and an "after" state of a load
step: 160 requests finished in between, with known made-up queue, prefill and
decode times; the phase block must read them back from the histogram deltas —
exact means, quantiles inside the right bucket of each server's own grid.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from llmload.loadtests import serverfamilies as sf
from llmload.loadtests.run.promsample import Histo, Sampler
from llmload.reports.server.diagnose import moved, phase_diagnostics
from llmload.reports.server.histogram import Delta, delta, quantile
from llmload.reports.server.phase import phase_block
from llmload.reports.server.saturation import server_saturation
from llmload.reports.table.schema import MetricStats, PhaseStats
from llmload.reports.table.scrapes import Scrape, ServerRun

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
#: what the fixtures' generator drew for the 160 requests between "before" and "after"
RNG = random.Random(2)
STEP = [(RNG.uniform(0, 1.6), RNG.uniform(0.05, 0.3), RNG.uniform(0.8, 2.4)) for _ in range(160)]


def server_run(name: str, extra_light: tuple[float, ...] = ()) -> ServerRun:
    sampler = Sampler(sf.known_names())
    text = {p: (FIXTURES / f"{name}-{p}.txt").read_text() for p in ("before", "after")}
    before = Scrape(100.0, sampler.sample(text["before"], True), True, ("start step",))
    after = Scrape(200.0, sampler.sample(text["after"], True), True, ("end step",))
    light = [Scrape(t, sampler.sample(text["after"], False)) for t in extra_light]
    return ServerRun({"status": "scraping"}, [before, *light, after])


def client(mode: str = "stream", ttft_mean: float = 1500.0) -> PhaseStats:
    dists = {"ttft_ms": MetricStats(160, ttft_mean, None, 2000.0, None, ttft_mean, None)}
    return PhaseStats(mode, 160, 160, {}, 0.0, 100.0, dists, 0, 0.0, 1.6, 1.6, 160, 1.0)


@pytest.mark.parametrize("name", ["vllm", "sglang", "tgi"])
def test_phase_block_reads_the_step_back(name: str) -> None:
    block = phase_block(server_run(name, (150.0,)), "step", 100.0, 200.0, client())
    assert block is not None and block["server"] == name and block["window"]["exact"]
    queue = block["latency"]["queue"]
    assert queue["n"] == 160
    exact_mean = sum(q for q, _, _ in STEP) / 160 * 1000
    assert queue["mean"] == pytest.approx(exact_mean, rel=1e-6)  # sums are exact
    exact = sorted(q * 1000 for q, _, _ in STEP)
    true_p95 = exact[math.ceil(0.95 * 160) - 1]
    p95 = queue["p95"]
    assert p95["lo"] <= true_p95 <= p95["hi"]  # the bucket holds the true value
    assert block["gauges"]["waiting"]["max"] == 23


def test_vllm_split_and_diagnostics() -> None:
    block = phase_block(server_run("vllm", (150.0,)), "step", 100.0, 200.0, client())
    assert block is not None
    split = block["ttft_split_ms"]
    queue = sum(q for q, _, _ in STEP) / 160 * 1000
    prefill = sum(p for _, p, _ in STEP) / 160 * 1000
    assert split["queue"] == pytest.approx(queue) and split["prefill"] == pytest.approx(prefill)
    assert split["server"] == pytest.approx(queue + prefill)  # the fixture's TTFT = q + prefill
    assert split["path"] == pytest.approx(1500.0 - queue - prefill)
    assert block["counters"]["preemptions"] == 7
    assert block["prefix_cache_hit_rate"] == pytest.approx((30500 - 6100) / (41000 - 9000))
    codes = {d.code: d for d in phase_diagnostics(block)}
    assert {"server_queue", "server_path", "server_kv_cache_full", "server_preemptions"} <= set(
        codes
    )
    assert "waited in vLLM's queue" in codes["server_queue"].message
    assert "waiting p95 23, KV cache up to 97 %" in codes["server_queue"].message


def test_latency_moved_names_the_queue_or_the_path() -> None:
    sr = server_run("vllm", (150.0,))
    low = PhaseStats(
        "stream",
        10,
        10,
        {},
        0.0,
        10.0,
        {"ttft_ms": MetricStats(10, 150, p95=180)},
        0,
        0,
        1,
        1,
        10,
        1,
    )
    high = PhaseStats(
        "stream",
        10,
        10,
        {},
        0.0,
        10.0,
        {"ttft_ms": MetricStats(10, 900, p95=910)},
        0,
        0,
        1,
        1,
        10,
        1,
    )
    b_low = phase_block(sr, "step", 100.0, 200.0, client())
    b_high = phase_block(sr, "step", 100.0, 200.0, client())
    assert b_low and b_high
    b_low["ttft_split_ms"]["queue"] = 5.0  # the lower load queued for nothing
    low.extra["server"], high.extra["server"] = b_low, b_high
    d = moved(("a", low), ("b", high), {"a": "8 req/s", "b": "16 req/s"})
    assert d is not None and d.code == "latency_moved"
    assert d.message.startswith("TTFT p95 grew from 180 to 910 ms between 8 req/s and 16 req/s")
    assert "requests waited in vLLM's queue" in d.message
    # the same server numbers, only the client slower: the path added it
    b_path = {**b_high, "ttft_split_ms": {**b_high["ttft_split_ms"], "path": 5000.0}}
    high.extra["server"], low.extra["server"] = b_path, b_high
    d = moved(("a", low), ("b", high), {})
    assert d is not None and "the server's own TTFT is flat; the path added it" in d.message


def test_histogram_quantile_and_its_bucket() -> None:
    h = Histo(10.0, 5.5, [0.1, 0.25, 0.5], [0.0, 4.0, 10.0])
    d = delta(None, h)
    q = quantile(d, 0.5)
    assert q is not None and (q.lo, q.hi) == (0.25, 0.5)
    assert q.value == pytest.approx(0.25 + 0.25 * (5 - 4) / 6)  # Prometheus's interpolation
    assert quantile(Delta(0.0, 0.0), 0.5) is None
    inf = quantile(Delta(5.0, 50.0, (1.0,), (2.0,)), 0.9)
    assert inf is not None and inf.value == 1.0 and inf.hi == math.inf


def test_server_saturation_evidence() -> None:
    sr = server_run("vllm", (150.0, 160.0))
    samples = [(s.t, s.sample) for s in sr.scrapes]
    why = server_saturation(samples, 100.0, 190.0, 200.0)
    assert any(
        w.startswith("server queue: vLLM had requests waiting in all 2 scrapes") for w in why
    )
    assert any(w.startswith("server KV cache: vLLM's reached 97%") for w in why)
    assert any(w.startswith("server preemptions: vLLM preempted 7") for w in why)
    assert server_saturation(samples[:1], 0.0, 50.0) == []


def test_an_open_loop_queue_counts_only_when_it_grows() -> None:
    from llmload.loadtests.run.promsample import Sample

    def series(waiting: list[float]) -> list[tuple[float, Sample]]:
        return [
            (
                float(t),
                Sample(values={"vllm:num_requests_waiting": w, "vllm:num_requests_running": 8}),
            )
            for t, w in enumerate(waiting)
        ]

    steady = series([2, 1, 3, 2, 1, 2, 3, 1, 2])  # a queue that comes and goes: below capacity
    growing = series([1, 2, 2, 4, 5, 7, 9, 12, 14])  # arrivals outpace the server
    assert server_saturation(steady, 0.0, 9.0)  # closed loop: waiting all the step is enough
    assert server_saturation(steady, 0.0, 9.0, growing=True) == []
    (why,) = server_saturation(growing, 0.0, 9.0, growing=True)
    assert why.startswith("server queue: vLLM had requests waiting in all 9 scrapes")
