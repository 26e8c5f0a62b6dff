"""May the load generator have caused this failure?  The gate's refusal, judged by evidence.

A failing check becomes inconclusive when the client's own delay could account
for the part of the change beyond what is allowed.  Which delay depends on what
can still reach the metric (``GateMetric.evidence``):

* ``send`` — a time counted from t0 (TTFT, TTFO, E2E): arrivals are stamped by
  the kernel, so what the client can still add is its *send side*, measured per
  request (``send_s``: t0 → the request's last byte written, connection set-up
  included).  Its p99 over the gated requests is the delay; a run whose records
  carry none (an older llmload) is judged as below.
* ``lag`` — ITL, TPOT, throughput, goodput, the error rate: a late event loop can
  merge reads, slow its users' pace or let a stall timer fire; the phase's
  harness health decides (starved: ``reports.table.trust.starved``), and for a latency
  its loop lag p99 is the delay.

"Could account": the delay is at least the excess over the allowance (a
latency), or — a rate or the error rate, which no delay in ms measures — the
client was starved at all.  A regression larger than anything the client could
add stands, with both figures in its reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.gate.metrics import LATENCY, SEND, MetricSpec
from llmload.reports.gate.result import FAIL, INCONCLUSIVE, Check
from llmload.reports.table.arraystats import percentile_sorted
from llmload.reports.table.columns import RecordTable
from llmload.reports.table.loader import Run
from llmload.reports.table.trust import STARVED_SHARE, harness_delay_ms, starved


def harness_doubt(run: Run, mode: str, share: float = STARVED_SHARE) -> tuple[str, float] | None:
    """Was the load generator starved in ``mode``'s phases: (why, its loop lag p99 in ms)."""
    for ph in run.meta.get("phases") or []:
        if not isinstance(ph, dict) or ph.get("mode") != mode:
            continue
        if str(ph.get("name", "")).endswith("warmup"):  # warmup, baseline-warmup
            continue
        health = ph.get("health") or {}
        why = starved(health, share, str(ph.get("name")))
        if why:
            return why, harness_delay_ms(health)
    return None


def send_delay_ms(records: Sequence[RequestRecord]) -> float | None:
    """The gated requests' send side p99 (ms), None when the records do not carry it (read
    from their column: ``reports.table.columns``)."""
    sends = RecordTable.of(records).num("send_s")
    sends = np.sort(sends[~np.isnan(sends)])
    return percentile_sorted(sends, 99) * 1000.0 if len(sends) else None


def excess_ms(check: Check) -> float | None:
    """How far a latency check's run value lies beyond what it allows (ms); None otherwise."""
    n = check.numbers
    if "limit_ms" in n:
        return float(n["run_ms"]) - float(n["limit_ms"])
    if "run_ms" in n and "baseline_ms" in n:
        return float(n["run_ms"]) - float(n["baseline_ms"]) * (1.0 + float(n["allowed"]))
    return None


def unless_starved(
    check: Check,
    run: Run,
    records: Sequence[RequestRecord],
    mode: str,
    spec: MetricSpec,
    share: float = STARVED_SHARE,
) -> Check:
    """``check``, or — a failure the client may have caused — inconclusive with the numbers."""
    if check.verdict != FAIL:
        return check
    excess = excess_ms(check)
    send = send_delay_ms(records) if spec.metric.evidence == SEND else None
    if send is not None and excess is not None:
        return _judged(
            check,
            send,
            excess,
            f"the load generator's send side (t0 → last byte written) has p99 {send:.1f} ms",
            "send side p99",
        )
    doubt = harness_doubt(run, mode, share)
    if doubt is None:
        return check
    why, lag = doubt
    if spec.metric.kind != LATENCY or excess is None:
        reason = f"inconclusive: {why} — not calling this a regression ({check.reason})"
        return Check(check.name, INCONCLUSIVE, reason, {**check.numbers, "starved": True})
    return _judged(check, lag, excess, f"{why}; its loop lag p99 is {lag:.0f} ms", "loop lag p99")


def _judged(check: Check, delay: float, excess: float, why: str, what: str) -> Check:
    nums: dict[str, Any] = {**check.numbers, "client_delay_ms": delay}
    if delay < excess:
        note = (
            f" (the client's own delay, {what} {delay:.1f} ms, is less than the "
            f"{excess:.1f} ms beyond what is allowed)"
        )
        return Check(check.name, FAIL, check.reason + note, nums)
    reason = (
        f"inconclusive: {why}, as much as the {excess:.1f} ms beyond what is allowed — "
        f"not calling this a regression ({check.reason})"
    )
    return Check(check.name, INCONCLUSIVE, reason, {**nums, "starved": True})
