"""reports.table.queue_growth: a queue building up through a phase reads as 'target saturated'."""

from __future__ import annotations

from dataclasses import replace

from llmload.reports.table.diagnostics import detect
from llmload.reports.table.queue_growth import target_saturated
from tests.fixtures.reports import make_records

T = 1_700_000_000.0


def _growing(n: int, start_s: float, end_s: float, server: bool = True) -> list:
    recs = make_records("stream", "stream", n, t_start=T, jitter=0.0)
    out = []
    for i, r in enumerate(recs):
        t = start_s + (end_s - start_s) * i / (n - 1)
        out.append(replace(r, ttft_s=t + 0.005, server_ttft_s=t if server else None))
    return out


def test_a_steady_phase_is_not_saturated() -> None:
    recs = make_records("stream", "stream", 60, t_start=T, jitter=0.1)
    assert target_saturated(recs) is None
    assert "target_saturated" not in [d.code for d in detect(recs, "stream")]


def test_ttft_growing_through_the_phase_is_flagged_with_a_plain_hint() -> None:
    found = detect(_growing(60, 0.05, 3.0), "stream")
    sat = next(d for d in found if d.code == "target_saturated")
    assert "the server's own TTFT median grew from" in sat.message
    assert "a queue building up" in sat.message and "--pacing" in sat.hint
    assert sat.evidence["ttft_last_third_ms"] > 2 * sat.evidence["ttft_first_third_ms"]
    # without server timings the client's TTFT tells the same story
    client = target_saturated(_growing(60, 0.05, 3.0, server=False))
    assert client is not None and client[0].startswith("The target looks saturated: client TTFT")


def test_small_or_short_rises_are_not_flagged() -> None:
    assert target_saturated(_growing(60, 0.05, 0.2)) is None  # 4x, but only +150 ms
    assert target_saturated(_growing(10, 0.05, 3.0)) is None  # too few requests


def test_open_loop_sends_falling_behind_are_flagged() -> None:
    recs = make_records("stream", "stream", 60, t_start=T, jitter=0.0, open_loop=True)
    late = [replace(r, schedule_delay_s=0.5 * i / 59) for i, r in enumerate(recs)]
    found = target_saturated(late)
    assert found is not None and "sends fell behind the schedule" in found[0]
