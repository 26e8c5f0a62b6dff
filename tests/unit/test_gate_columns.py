"""The gate and the workload blocks read columns: the same numbers as record by record.

``reports.gate.metrics`` and ``reports.workloads.measure`` read a run's ``RecordTable``
(``reports.table.columns``).  Each is checked here against the record-by-record
computation it replaced, written out below, on records of every shape: sync,
streams of one token per event, of several (``tokens_per_event``), with a token
list that does not match their events, without TTFT or output tokens, failed,
lost, open loop or not, agent sessions complete and not.  Times are
irregular floats so that a running sum taken in another order would land on
other bits, and the chunks of ``_events`` are small so that records cross them.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

import pytest

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.gate import metrics
from llmload.reports.gate.metrics import REGISTRY, latency_ms, outcomes, per_second
from llmload.reports.table.columns import RecordTable
from llmload.reports.table.schema import MetricStats
from llmload.reports.workloads.measure import agent_sessions, prefix_cache

T0 = 1.7e9 + 0.123456789


def records(n: int = 400, seed: int = 3) -> list[RequestRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        mode = "sync" if i % 5 == 0 else "stream"
        status = "ok" if i % 11 else rng.choice(("timeout", "lost", "http_5xx"))
        ok = status == "ok"
        gaps = (
            [rng.uniform(0.001, 0.3) for _ in range(rng.randint(0, 40))] if mode == "stream" else []
        )
        shape = i % 4
        if shape == 0:
            tpe = [1] * (len(gaps) + 1)
        elif shape == 1:
            tpe = [rng.randint(0, 3) for _ in range(len(gaps) + 1)]
        elif shape == 2:
            tpe = [2] * len(gaps)  # one entry short of its events
        else:
            tpe = []
        ttft = None if i % 13 == 0 else rng.uniform(0.05, 2.0)
        tokens = 0 if i % 17 == 0 else (sum(tpe) or len(gaps) + 1)
        session = f"s{i // 5}" if i < 200 else None
        out.append(
            RequestRecord(
                request_id=f"r{i}",
                phase="stream" if i < n // 2 else "stream-2",
                scenario=("a", "b")[i % 2],
                mode=mode,  # type: ignore[arg-type]  # a test value outside the declared type, on purpose
                endpoint="/v1/chat/completions",
                started_at=T0 + i * rng.uniform(0.01, 0.09),
                status=status,
                ttft_s=ttft if ok else None,
                e2e_s=(0.0 if i % 19 == 0 else (ttft or 0.1) + sum(gaps)) if ok else None,
                tpot_s=sum(gaps) / len(gaps) if ok and gaps else None,
                itl_s=gaps if ok else [],
                output_tokens=tokens if ok else None,
                prompt_tokens=rng.choice((0, None, rng.randint(10, 500))),
                tokens_per_event=tpe if ok else [],
                schedule_delay_s=rng.uniform(0, 0.05) if i % 3 else None,
                ttfo_s=ttft if ok and i % 7 else None,
                cached_tokens=rng.choice((None, 0, 16, 64)) if ok else None,
                session_id=session,
                step=(i % 5 if i % 23 else i % 5 + 1) if session else None,
                finish_reason="tool_calls" if session and i % 5 < 4 else "stop",
            )
        )
    return out


# -- the record-by-record computations the columns replaced ----------------------------------


def old_events(r: RequestRecord) -> list[tuple[float, float]]:
    if r.ttft_s is None or not r.output_tokens:
        return []
    t = r.started_at + r.ttft_s
    if r.mode == "sync" or not r.itl_s:
        return [(r.started_at + (r.e2e_s or r.ttft_s), float(r.output_tokens))]
    times = [t]
    for gap in r.itl_s:
        t += gap
        times.append(t)
    if len(r.tokens_per_event) == len(times):
        return [(x, float(n)) for x, n in zip(times, r.tokens_per_event, strict=True)]
    return [(x, r.output_tokens / len(times)) for x in times]


def old_meets(r: RequestRecord, slo: dict[str, float]) -> bool:
    if not r.ok:
        return False
    checks = {"ttft": r.ttft_s, "e2e": r.e2e_s, "tpot": r.tpot_s}
    for name, limit_ms in slo.items():
        value = checks.get(name)
        if value is None:
            if name == "tpot":
                continue
            return False
        if value * 1000.0 > limit_ms:
            return False
    return True


def old_settled(recs: list[RequestRecord], windows: Any) -> list[tuple[float, float]]:
    out = []
    for start, end in windows:
        done = [
            r.started_at + r.e2e_s
            for r in recs
            if r.ok and r.e2e_s is not None and start <= r.started_at < end
        ]
        if done:
            start += min(max(0, math.ceil(min(done) - start)), max(0, int(end - start)))
        out.append((start, end))
    return out


def old_per_second(recs: list[RequestRecord], name: str, windows: Any, slo: Any) -> list[float]:
    windows = old_settled(recs, windows)
    bins = [[0.0] * int(end - start) for start, end in windows]

    def add(t: float, amount: float) -> None:
        for (start, _), counts in zip(windows, bins, strict=True):
            k = int(math.floor(t - start))
            if 0 <= k < len(counts):
                counts[k] += amount
                return

    for r in recs:
        if not r.ok:
            continue
        if name == "throughput":
            for t, tokens in old_events(r):
                add(t, tokens)
        elif old_meets(r, slo) and r.e2e_s is not None:
            add(r.started_at + r.e2e_s, 1.0)
    return [x for counts in bins for x in counts]


# -- the checks ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["throughput", "goodput"])
def test_rates_per_second_are_the_record_by_record_ones(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setattr(metrics, "EVENT_CHUNK", 7)  # records cross the chunks
    recs = records()
    t = RecordTable.of(recs)
    # two windows, the second overlapping the first's end: an event counts in the first
    windows = [(T0 + 0.5, T0 + 9.5), (T0 + 9.0, T0 + 40.0)]
    slo = {"ttft": 1500.0, "tpot": 200.0, "e2e": 4000.0}
    got = per_second(t, REGISTRY[name], windows, slo)
    want = old_per_second(recs, name, windows, slo)
    assert got == want and sum(want) > 0
    # a selection of the table reads only its own records
    half = t.where(t.is_("scenario", "b"))
    assert per_second(half, REGISTRY[name], windows, slo) == old_per_second(
        [r for r in recs if r.scenario == "b"], name, windows, slo
    )


def test_arrivals_are_running_sums_gap_by_gap() -> None:
    recs = records()
    t = RecordTable.of(recs)
    firsts = t.num("started_at") + 0.1
    want = []
    for r, first in zip(recs, firsts.tolist(), strict=True):
        at = first
        want.append(at)
        for gap in r.itl_s:
            at += gap
            want.append(at)
    got = t.arrivals(firsts)
    # bit for bit: the same additions in the same order (the flat array's cumulative sum,
    # less what came before each record, lands on other bits)
    assert got.tolist() == want
    assert sum(len(r.itl_s) for r in recs) > 1000


def test_latencies_and_outcomes_are_the_record_by_record_ones() -> None:
    recs = records()
    t = RecordTable.of(recs)
    for metric in REGISTRY.values():
        if metric.column is None:
            continue
        want = []
        for r in recs:
            if not r.ok:
                continue
            values = r.itl_s if metric.column == "itl_s" else [getattr(r, metric.column)]
            for v in values:
                if metric.from_intended:
                    d = r.schedule_delay_s
                    v = None if v is None or d is None else v + d
                if v is not None and math.isfinite(v):
                    want.append(v * 1000.0)
        assert latency_ms(t, metric).tolist() == want and want, metric.name
    lost = sum(r.status == "lost" for r in recs)
    assert lost and outcomes(t) == (len(recs) - lost, sum(not r.ok for r in recs) - lost)


def test_workload_blocks_are_the_record_by_record_ones() -> None:
    recs = records()
    ms = 1000.0
    sessions: dict[str, list[RequestRecord]] = {}
    for r in recs:
        if r.session_id is not None and r.step is not None:
            sessions.setdefault(r.session_id, []).append(r)
    times, lengths = [], []
    for group in sessions.values():
        group.sort(key=lambda r: r.step or 0)
        first, last = group[0], group[-1]
        if (
            [r.step for r in group] == list(range(len(group)))
            and all(r.ok for r in group)
            and last.finish_reason != "tool_calls"
            and last.e2e_s is not None
        ):
            lengths.append(len(group))
            times.append(last.started_at + (last.e2e_s or 0.0) - first.started_at)
    block = agent_sessions(RecordTable.of(recs))
    assert block is not None
    assert (block["sessions"], block["complete"]) == (len(sessions), len(times))
    assert 0 < block["complete"] < block["sessions"]
    assert block["session_ms"] == MetricStats.of(times, ms).to_json()
    assert block["steps_per_session_mean"] == sum(lengths) / len(lengths)
    step1 = [r for g in sessions.values() for r in g if r.step == 1 and r.ok]
    assert block["steps"]["1"]["ttft_ms"] == MetricStats.of((r.ttft_s for r in step1), ms).to_json()

    told = [r for r in recs if r.ok and r.cached_tokens is not None and r.prompt_tokens]
    hits = [r for r in told if r.cached_tokens]
    cache = prefix_cache(RecordTable.of(recs))
    assert cache is not None and 0 < len(hits) < len(told)
    assert cache["prompt_tokens"] == sum(r.prompt_tokens or 0 for r in told)
    assert cache["hit_rate"] == sum(r.cached_tokens or 0 for r in told) / cache["prompt_tokens"]
    assert cache["ttft_hit_ms"] == MetricStats.of((r.ttft_s for r in hits), ms).to_json()


def test_a_phase_s_ramp_second_is_left_out_of_its_rates() -> None:
    """Nothing is in flight when a phase starts: the seconds before its first complete answer
    are a ramp, not the rate, and would widen the gate's interval on the mean."""
    window = [(T0, T0 + 6.0)]
    recs = [
        replace(r, started_at=T0 + 0.1 * (i % 8), e2e_s=1.4, status="ok", error=None)
        for i, r in enumerate(records()[:16])
    ]
    t = RecordTable.of(recs)
    assert metrics.settled(window, t) == [(T0 + 2.0, T0 + 6.0)]  # first done at +1.4 s
    assert len(per_second(t, REGISTRY["throughput"], window, None)) == 4
    # a window none of whose requests finished is kept whole
    assert metrics.settled(window, t.where(~t.ok() & t.ok())) == window
