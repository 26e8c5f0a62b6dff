"""HealthSampler without gevent: thread ticker, lag detection, clean stop."""

from __future__ import annotations

import threading
import time

from llmload.loadtests.run.health import HealthSampler
from llmload.loadtests.run.sinks import HarnessHealth


def burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(200))


def test_snapshot_reports_cpu_lag_and_inflight() -> None:
    sampler = HealthSampler(inflight=lambda: 7, tick_s=0.01)
    sampler.start()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        burn(0.3)
        snap = sampler.snapshot()
    finally:
        sampler.stop()
    # the CPU this process actually got meanwhile (a busy neighbour leaves it far below 100 %)
    got = (time.process_time() - cpu) / (time.perf_counter() - wall) * 100
    assert isinstance(snap, HarnessHealth)
    assert snap.inflight == 7
    assert got > 0 and snap.cpu_percent > 0.5 * got, (snap, got)  # this thread was spinning
    assert snap.loop_lag_s >= 0


def test_lag_sees_a_blocked_interpreter_and_resets_per_snapshot() -> None:
    sampler = HealthSampler(tick_s=0.01)
    sampler.start()
    try:
        time.sleep(0.05)
        sampler.snapshot()
        # Hold the GIL in one C call: the ticker cannot wake until it returns.
        t0 = time.perf_counter()
        sum(range(30_000_000))
        held = time.perf_counter() - t0
        time.sleep(0.05)
        stalled = sampler.snapshot()
        time.sleep(0.1)
        calm = sampler.snapshot()
    finally:
        sampler.stop()
    assert stalled.loop_lag_s > held * 0.5, (stalled, held)
    assert calm.loop_lag_s < stalled.loop_lag_s


def test_on_snapshot_called_every_interval_and_stop_is_clean() -> None:
    got: list[HarnessHealth] = []
    sampler = HealthSampler(got.append, interval_s=0.1, tick_s=0.01)
    before = threading.active_count()
    sampler.start()
    assert sampler.running
    time.sleep(0.55)
    sampler.stop()
    assert not sampler.running
    n = len(got)
    assert 2 <= n <= 7, n  # ~5 at 0.1 s; a loaded machine may deschedule the ticker
    time.sleep(0.2)
    assert len(got) == n  # nothing after stop
    assert threading.active_count() == before
    sampler.stop()  # idempotent


def test_a_failing_consumer_does_not_end_sampling() -> None:
    calls: list[int] = []

    def flaky(_: HarnessHealth) -> None:
        calls.append(1)
        raise RuntimeError("sink broke")

    sampler = HealthSampler(flaky, interval_s=0.05, tick_s=0.01)
    sampler.start()
    time.sleep(0.3)
    sampler.stop()
    assert len(calls) >= 3
