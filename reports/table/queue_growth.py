"""``target_saturated``: the target could not keep up, so latencies are mostly queueing.

A phase's offered load is steady (closed loop: the same users and pacing; open
loop: the same rate), so a target that keeps up shows steady latencies through
the phase.  One that cannot builds a queue: the time to the first token grows
from the first third of the phase to the last, and in open loop the sends fall
behind their schedule too.  The phase is flagged when, over at least
``MIN_REQUESTS`` successful requests ordered by start time,

* the TTFT median (the server's own when it reports one, else the client's) of
  the last third is at least ``GROWTH`` x that of the first third and at least
  ``MIN_RISE_S`` higher ("the queue grew through the phase"), or
* (open loop) the schedule-delay median of the last third is over
  ``DELAY_S`` and above the first third's ("sends fell behind").

Pure function of the records; ``reports.table.diagnostics.detect`` calls it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.table.columns import RecordTable

MIN_REQUESTS = 15
GROWTH = 2.0
MIN_RISE_S = 0.3
DELAY_S = 0.1

HINT = (
    "The target could not keep up with this load, so these latencies are mostly time spent "
    "waiting in its queue, not its speed. Lower the load (--users, or a longer --pacing / "
    "lower --rate) to measure the target itself, or give it more capacity. With the bundled "
    "server, the warm-up's 'engine speed' line says what this machine can serve."
)


def _thirds(values: list[float]) -> tuple[float, float]:
    k = max(1, len(values) // 3)
    return statistics.median(values[:k]), statistics.median(values[-k:])


def target_saturated(records: Sequence[RequestRecord]) -> tuple[str, str, dict[str, float]] | None:
    """(message, hint, evidence) when the phase's records show a saturated target, else None."""
    t = RecordTable.of(records)
    ttft_all = t.num("ttft_s")
    keep = t.ok() & ~np.isnan(ttft_all)
    if int(keep.sum()) < MIN_REQUESTS:
        return None
    order = np.argsort(t.num("started_at")[keep], kind="stable")
    s_ttft = t.num("server_ttft_s")[keep][order]
    server = not np.isnan(s_ttft).any()
    ttft = (s_ttft if server else ttft_all[keep][order]).tolist()
    first, last = _thirds(ttft)
    evidence = {"ttft_first_third_ms": first * 1000, "ttft_last_third_ms": last * 1000}
    grew = last >= GROWTH * first and last - first >= MIN_RISE_S
    delay = t.num("schedule_delay_s")[keep][order]
    delays = delay[~np.isnan(delay)].tolist()
    behind = False
    if len(delays) >= MIN_REQUESTS:
        d_first, d_last = _thirds(delays)
        evidence |= {"delay_first_third_ms": d_first * 1000, "delay_last_third_ms": d_last * 1000}
        behind = d_last > DELAY_S and d_last > d_first
    if not (grew or behind):
        return None
    whose = "the server's own" if server else "client"
    parts = []
    if grew:
        parts.append(
            f"{whose} TTFT median grew from {first * 1000:,.0f} ms in the first third of the "
            f"phase to {last * 1000:,.0f} ms in the last (a queue building up)"
        )
    if behind:
        parts.append(
            f"sends fell behind the schedule (median delay {evidence['delay_last_third_ms']:,.0f} "
            "ms in the last third)"
        )
    message = "The target looks saturated: " + "; ".join(parts) + "."
    return message, HINT, evidence
