"""Capacity: judging one step of a search against SLOs, and the load–latency curve of a search.

SLOs.  ``ttft_p95=600ms`` asks that the 95th percentile of TTFT stay within
600 ms; ``ttft=600ms,tpot=50ms`` (the goodput spelling of ``loadtests.slo``)
asks that at least ``goodput`` (95 % unless ``goodput=90%`` is given) of the
requests meet *every* bound.  Both are the same test: a criterion is a
quantile ``q`` and bounds, each request scores ``max(value / bound)`` over the
bounds (a failed request scores infinity), and the criterion holds when the
``q``-quantile of the scores is at most 1 — equivalently, when at least a
share ``q`` of the requests scored 1 or less.

Confidence.  With ``k`` of ``n`` requests within bounds, the step *passes*
when a true share of only ``q`` would have produced ``k`` or more with
probability below ``1 - confidence`` (an exact one-sided binomial test, the
distribution-free test for a percentile), *fails* when ``k`` or fewer would be
that unlikely, and is *uncertain* in between — counted as not sustained, so
a capacity claim is always one the data supports.  A pass needs at least
``samples_needed`` requests (59 for p95 at 95 %).

Open-loop steps measure TTFT and E2E from the intended send time (plus the
schedule delay), so a load generator that fell behind cannot hide queueing.
An arrival is a request, or an agent session (its first step's record): the
schedule kept is counted in arrivals, the SLOs in requests.

Whose delay.  A send goes out late for one of two reasons: every user (the
concurrency cap) was busy with the target — queueing, the target's — or the load
generator itself woke late (a busy machine, a lagging event loop).  The records
tell them apart: at a late request's intended send time, how many users still had a
request (an agent session) under way (``schedule_lateness``).  Only the delay of a
request due while (nearly) every user was busy, and only beyond the load generator's
own loop lag, is the target's; the rest is the client's, and never saturation.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from llmload.loadtests.durations import parse_fraction
from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.run.capacity import RATIO_CAP
from llmload.loadtests.slo import METRICS, parse_duration_ms
from llmload.reports.table.arraystats import percentile_sorted
from llmload.reports.table.columns import RecordTable
from llmload.reports.table.stats import percentile

DEFAULT_GOODPUT = 0.95
#: a step with more failed requests than this share saturated the target
MAX_ERROR_SHARE = 0.05
#: open loop: the step kept less than this share of its schedule (requests sent late or never)
KEPT_SCHEDULE_SHARE = 0.9
#: open loop: a p95 schedule delay above this means the sends fell behind the schedule —
#: queueing when they waited for a free user, else the load generator's own delay
LATE_P95_MS = 50.0
#: open loop: "every user busy" allows this share of the concurrency cap (rounded down)
#: between one request's end and the next send
BUSY_SLACK = 0.1
#: open loop: the second half of a step's requests (by start) scoring this much worse than
#: the first, on a trend that would cross the bound within one more step, is a queue
#: still building
GROWING_RATIO = 1.3
_PCT = re.compile(r"^(ttft|tpot|e2e)_p(\d{1,2}(?:\.\d+)?)$")


@dataclass(frozen=True)
class Criterion:
    """At least ``quantile`` of the requests within every bound (ms) in ``bounds_ms``."""

    quantile: float
    bounds_ms: dict[str, float]

    @property
    def spec(self) -> str:
        """The criterion as typed: ``ttft_p95=600ms`` or ``goodput=95%:ttft=600ms,tpot=50ms``."""
        if len(self.bounds_ms) == 1:
            ((name, ms),) = self.bounds_ms.items()
            return f"{name}_p{self.quantile * 100:g}={ms:g}ms"
        bounds = ",".join(f"{k}={v:g}ms" for k, v in self.bounds_ms.items())
        return f"goodput={self.quantile * 100:g}%:{bounds}"

    @property
    def text(self) -> str:
        """For people: ``p95 TTFT ≤ 600 ms``, ``≥ 95% of requests within TTFT 600 ms, …``."""
        if len(self.bounds_ms) == 1:
            ((name, ms),) = self.bounds_ms.items()
            return f"p{self.quantile * 100:g} {name.upper()} ≤ {ms:g} ms"
        bounds = ", ".join(f"{k.upper()} {v:g} ms" for k, v in self.bounds_ms.items())
        return f"≥ {self.quantile:.0%} of requests within {bounds}"


def parse_capacity_slo(spec: str) -> list[Criterion]:
    """``ttft_p95=600ms,tpot_p99=80ms`` and/or ``goodput=95%,ttft=600ms,tpot=50ms``."""
    percentiles: list[Criterion] = []
    joint: dict[str, float] = {}
    goodput = DEFAULT_GOODPUT
    for part in filter(None, (p.strip() for p in spec.split(","))):
        try:
            goodput = _criterion(part, percentiles, joint, goodput)
        except ValueError as exc:
            raise ValueError(f"bad SLO {part!r}: {exc}") from None
    out = percentiles + ([Criterion(goodput, joint)] if joint else [])
    if not out:
        raise ValueError(f"empty SLO {spec!r}")
    return out


def _criterion(
    part: str, percentiles: list[Criterion], joint: dict[str, float], goodput: float
) -> float:
    """Add one ``NAME=VALUE`` to ``percentiles`` or ``joint``; the goodput share (updated)."""
    name, sep, value = part.partition("=")
    name = name.strip().lower()
    if not sep:
        raise ValueError("expected NAME=VALUE")
    if name == "goodput":
        return _share(value)
    m = _PCT.match(name)
    if m:
        q = float(m.group(2)) / 100.0
        if not 0 < q < 1:
            raise ValueError("the percentile must be between 0 and 100")
        percentiles.append(Criterion(q, {m.group(1): parse_duration_ms(value)}))
    elif name in METRICS:
        joint[name] = parse_duration_ms(value)
    else:
        raise ValueError(
            f"use METRIC_pNN=DURATION (e.g. ttft_p95=600ms) or "
            f"METRIC=DURATION with goodput=NN% (METRIC in {', '.join(METRICS)})"
        )
    return goodput


def _share(text: str) -> float:
    value = parse_fraction(text)
    if not 0 < value < 1:
        raise ValueError(f"goodput must be a share between 0 and 100%, got {text!r}")
    return value


def samples_needed(quantile: float, confidence: float) -> int:
    """The fewest requests that can show a ``quantile`` within bounds (all of them within)."""
    return math.ceil(math.log(1.0 - confidence) / math.log(quantile) - 1e-9)


def binomial_tail(k: int, n: int, p: float, upper: bool) -> float:
    """``P(K >= k)`` (``upper``) or ``P(K <= k)`` for ``K ~ Binomial(n, p)``, exact."""
    if upper and k <= 0 or not upper and k >= n:
        return 1.0
    ks = range(k, n + 1) if upper else range(0, k + 1)
    lp, lq = math.log(p), math.log1p(-p)
    base = math.lgamma(n + 1)
    terms = [base - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq for i in ks]
    top = max(terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


_COLUMNS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}


def _values_ms(t: RecordTable, metric: str, open_loop: bool) -> np.ndarray:
    """Each record's ``metric`` in ms (NaN: none); open loop, TTFT and E2E from the intended
    send time (plus the schedule delay, where the record has one)."""
    value = t.num(_COLUMNS[metric])
    if open_loop and metric != "tpot":
        delay = t.num("schedule_delay_s")
        value = np.where(np.isnan(delay), value, value + delay)
    return value * 1000.0


def _scores(t: RecordTable, c: Criterion, open_loop: bool) -> np.ndarray:
    worst = np.zeros(len(t))
    for metric, bound in c.bounds_ms.items():
        v = _values_ms(t, metric, open_loop)
        # a missing TPOT (a one-token answer) is not held against it; any other is
        missing = 0.0 if metric == "tpot" else math.inf
        worst = np.maximum(worst, np.where(np.isnan(v), missing, v / bound))
    worst[~t.ok()] = math.inf
    return worst


def scores(records: Iterable[RequestRecord], c: Criterion, open_loop: bool) -> list[float]:
    """Each request's worst ``value / bound`` (inf when it failed; a missing TPOT is not held
    against a one-token answer), read from the records' columns (``reports.table.columns``)."""
    return _scores(RecordTable.of(records), c, open_loop).tolist()


def quantile_ratio(sorted_scores: Sequence[float], q: float) -> float | None:
    """The ``q``-quantile of the scores (1.0: exactly at the bound), capped at ``RATIO_CAP``."""
    if not sorted_scores:
        return None
    capped = [min(s, RATIO_CAP) for s in sorted_scores]
    return percentile(capped, q * 100.0)


def judge_criterion(sc: Sequence[float], c: Criterion, confidence: float) -> dict[str, Any]:
    """One criterion on one step: the observed ratio and the pass/fail/uncertain verdict."""
    n = len(sc)
    good = sum(s <= 1.0 for s in sc)
    alpha = 1.0 - confidence
    if n and binomial_tail(good, n, c.quantile, upper=True) <= alpha:
        verdict = "pass"
    elif n and binomial_tail(good, n, c.quantile, upper=False) <= alpha:
        verdict = "fail"
    else:
        verdict = "uncertain"
    ratio = quantile_ratio(sorted(sc), c.quantile)
    return {
        "slo": c.spec,
        "text": c.text,
        "n": n,
        "within": good,
        "share_within": good / n if n else None,
        "ratio": ratio,
        "observed_ms": _observed_ms(c, ratio),
        "verdict": verdict,
    }


def _observed_ms(c: Criterion, ratio: float | None) -> float | None:
    """For a one-metric criterion, its observed percentile in ms (the ratio times the bound)."""
    if ratio is None or len(c.bounds_ms) != 1 or ratio >= RATIO_CAP:
        return None
    return ratio * next(iter(c.bounds_ms.values()))


def _pcts(values: np.ndarray) -> dict[str, float | None]:
    xs = np.sort(values[~np.isnan(values)])
    return {
        "p50": percentile_sorted(xs, 50) if len(xs) else None,
        "p95": percentile_sorted(xs, 95) if len(xs) else None,
    }


def judge(
    records: Sequence[RequestRecord],
    criteria: Sequence[Criterion],
    confidence: float,
    *,
    duration_s: float,
    open_loop: bool,
    scheduled: int | None = None,
    cap: int | None = None,
    client_lag_ms: float = 0.0,
) -> dict[str, Any]:
    """One step: its curve point (latencies, throughput, errors), criteria, verdict, saturation.

    ``scheduled``: open loop, how many arrivals (requests, or agent sessions) the step's
    schedule held.  ``cap``: open loop, the concurrency cap (users), and
    ``client_lag_ms``: the load generator's own loop lag in the step (p99) — together
    they say whose a schedule delay was (``schedule_lateness``; without ``cap``, an
    older run's, every delay counts as queueing).
    """
    t = RecordTable.of(records)
    ok = t.ok()
    n, n_ok = len(t), int(ok.sum())
    # a session's later steps follow its answers: only its first step was an arrival
    arrivals = int(np.count_nonzero(~(t.num("step") > 0)))
    dur = max(duration_s, 1e-9)
    crit = [judge_criterion(scores(t, c, open_loop), c, confidence) for c in criteria]
    verdicts = {c["verdict"] for c in crit}
    verdict = "pass" if verdicts == {"pass"} else "fail" if "fail" in verdicts else "uncertain"
    ratios = [c["ratio"] for c in crit if c["ratio"] is not None]
    # throughput: open loop, what completed while the step's schedule ran (not the drain
    # after it, so an overloaded target shows what it served, not what was offered);
    # closed loop, the step lasts until its last request ends
    started, e2e = t.num("started_at"), t.num("e2e_s")
    t0 = float(started.min()) if n else 0.0
    done = ok
    if open_loop:
        done = ok & ~np.isnan(e2e) & (started + e2e <= t0 + dur)
    tokens = t.num("output_tokens")[done]
    inputs = t.num("inputs")[done]  # embeddings, rerank: texts per request (else NaN)
    point: dict[str, Any] = {
        "requests": n,
        "arrivals": arrivals,
        "ok": n_ok,
        "error_rate": (n - n_ok) / n if n else 0.0,
        "duration_s": duration_s,
        "sent_per_s": n / dur,
        "throughput_per_s": int(done.sum()) / dur,
        "output_tokens_per_s": int(tokens[~np.isnan(tokens)].astype(np.int64).sum()) / dur,
        "ttft_ms": _pcts(_values_ms(t, "ttft", open_loop)[ok]),
        "tpot_ms": _pcts(_values_ms(t, "tpot", open_loop)[ok]),
        "e2e_ms": _pcts(_values_ms(t, "e2e", open_loop)[ok]),
        "from_intended": open_loop,
        "criteria": crit,
        "ratio": max(ratios) if ratios else None,
        "verdict": verdict,
    }
    if (~np.isnan(inputs)).any():  # a run without streams: what it serves is inputs
        point["inputs_per_s"] = float(np.nansum(inputs)) / dur
    late = schedule_lateness(t, cap, client_lag_ms) if open_loop else None
    # the target's own latency: the client's part of each schedule delay taken out
    target: Sequence[RequestRecord] = t if late is None else late.target_records
    if late is not None:
        point["schedule_delay_ms_p95"] = late.delay_ms_p95
        point["target_delay_ms_p95"] = late.target_ms_p95
    else:
        delays = np.sort(t.num("schedule_delay_s") * 1000)
        delays = delays[~np.isnan(delays)]
        if len(delays):
            point["schedule_delay_ms_p95"] = percentile_sorted(delays, 95)
    queue = t.num("server_queue_s")[ok] * 1000
    queue = np.sort(queue[~np.isnan(queue)])
    if len(queue):
        point["server_queue_ms_p95"] = percentile_sorted(queue, 95)
    sessions = bool(t.has("session_id").any())
    point["saturated"] = _saturation(point, open_loop, scheduled, sessions)
    if late is not None and late.delay_ms_p95 > LATE_P95_MS:
        if late.target_ms_p95 > LATE_P95_MS:
            if not any(s.startswith("schedule") for s in point["saturated"]):
                point["saturated"].append(late.queueing_text())
        else:
            # the sends were late, but not for want of a free user: the client's own delay
            on_time = [judge_criterion(scores(target, c, True), c, confidence) for c in criteria]
            behind = late.behind(on_time)
            # arrivals due within the client's delay: 1 or more, the late sends went out in bursts
            behind["bunched"] = late.delay_ms_p95 / 1000.0 * arrivals / dur
            point["client_behind"] = behind
    growing, growth = _growing(target, criteria, open_loop) if open_loop else ("", 0.0)
    if growing:
        # above the target's capacity an open-loop queue grows for as long as the step
        # lasts: a short step can still look fine on average, but it is not sustained
        point["saturated"].append(growing)
        point["verdict"] = "fail"
        if "client_behind" in point:  # the target's own latency grew: the client is no excuse
            point["client_behind"]["verdict_on_time"] = "fail"
    # how far beyond the SLO the step was, in ms: more than a client's own delay can explain
    tightest = min(v for c in criteria for v in c.bounds_ms.values())
    beyond = max(0.0, (point["ratio"] or 0.0) - 1.0, growth)
    point["beyond_slo_ms"] = beyond * tightest
    return point


def explained_by_client(point: dict[str, Any], health: dict[str, Any]) -> bool:
    """Could the load generator alone have failed this step?  Behind its own schedule
    (``client_behind``): when the step, judged without the client's part of each schedule
    delay, would not have failed; or failed by no more than that delay (p95) while a whole
    arrival or more was due within it (``bunched``): the sends it let slip went out
    together, a burst the schedule did not hold.  Starved: each timestamp it took was late
    by at most its worst event-loop lag.  A failure by more than that stands."""
    behind = point.get("client_behind")
    if behind and point.get("verdict") == "fail":
        if behind.get("verdict_on_time") != "fail":
            return True
        within = point.get("beyond_slo_ms", math.inf) <= behind["schedule_delay_ms_p95"]
        if within and behind.get("bunched", 0.0) >= 1.0:
            return True
    lags = [
        float(p.get("lag_max_ms") or 0.0)
        for src, p in (health.get("processes") or {}).items()
        if src in (health.get("starved") or [])
    ]
    return bool(lags) and point.get("beyond_slo_ms", math.inf) <= max(lags)


def _growing(
    records: Sequence[RequestRecord], criteria: Sequence[Criterion], open_loop: bool
) -> tuple[str, float]:
    """'' or why the step's latency was still climbing when it ended, and by how much
    (in SLO ratio: the second half's median minus the first's)."""
    if len(records) < 20:
        return "", 0.0
    t = RecordTable.of(records)
    order = np.argsort(t.num("started_at"), kind="stable")
    worst = np.max([_scores(t, c, open_loop)[order] for c in criteria], axis=0)
    half = len(worst) // 2
    capped = np.minimum(worst, RATIO_CAP)
    first = percentile_sorted(np.sort(capped[:half]), 50)
    second = percentile_sorted(np.sort(capped[half:]), 50)
    # one more step is two more half-steps along the same trend
    if second > GROWING_RATIO * first and second + 2 * (second - first) >= 1.0:
        return (
            f"growing: median SLO ratio {first:.2f} in the step's first half, {second:.2f} "
            f"in the second (a queue building)"
        ), second - first
    return "", 0.0


def _saturation(
    point: dict[str, Any], open_loop: bool, scheduled: int | None, sessions: bool = False
) -> list[str]:
    """Why this step shows a target that stopped keeping up (empty: it kept up) by its errors
    and the schedule kept; ``sessions``: its arrivals were agent sessions.  (Late sends are
    judged by ``schedule_lateness``: queueing only when they waited for a free user.)"""
    why = []
    if point["requests"] and point["error_rate"] > MAX_ERROR_SHARE:
        why.append(f"errors: {point['error_rate']:.0%} of requests failed")
    if open_loop:
        sent = point.get("arrivals", point["requests"])
        if scheduled and sent < KEPT_SCHEDULE_SHARE * scheduled:
            what = "sessions started" if sessions else "requests sent"
            why.append(f"schedule: {sent} of {scheduled} scheduled {what}")
    return why


@dataclass(frozen=True)
class Lateness:
    """Whose an open-loop step's schedule delays were (``schedule_lateness``)."""

    #: p95 of every schedule delay (ms), and of the target's part of each
    delay_ms_p95: float
    target_ms_p95: float
    #: the records with only the target's part of their delay (the client's taken out)
    target_records: list[RequestRecord]
    #: the most users busy when a late request (delay > ``LATE_P95_MS``) was due; None
    #: without a cap
    busy_max: int | None
    cap: int | None
    #: users busy at or above this: "every user busy"
    busy_line: int | None
    lag_ms: float

    def queueing_text(self) -> str:
        """The saturation reason: sends waited for a free user, beyond the client's lag."""
        busy = "every user busy"
        if self.cap is not None:
            busy += f": up to {self.busy_max} of {self.cap}"
        if self.lag_ms > 0:
            busy += f"; {self.target_ms_p95:.0f} ms beyond the load generator's own lag"
        return f"queueing: schedule delay p95 {self.delay_ms_p95:.0f} ms ({busy})"

    def behind(self, on_time: list[dict[str, Any]]) -> dict[str, Any]:
        """``client_behind``: the sends were late by the load generator's own doing, with the
        figures, and the verdict the step gets with the client's part of each delay taken out."""
        verdicts = {c["verdict"] for c in on_time}
        verdict = "pass" if verdicts == {"pass"} else "fail" if "fail" in verdicts else "uncertain"
        lag = f"its event loop lagged {self.lag_ms:.0f} ms (p99)"
        if self.busy_max is not None and self.busy_line is not None:
            if self.busy_max < self.busy_line:
                why = f", due while at most {self.busy_max} of the {self.cap} users were busy"
            else:
                why = (
                    f", every user busy for some of them but by no more than the load "
                    f"generator's own lag (the target's part p95 {self.target_ms_p95:.0f} ms)"
                )
            if self.lag_ms > 0:
                why += f"; {lag}"
        else:  # an older run: no cap to count the busy users against
            why = f", no more than the load generator's own lag ({lag})"
        return {
            "text": (
                f"load generator behind, not the target: sends {self.delay_ms_p95:.0f} ms late "
                f"(p95){why}"
            ),
            "schedule_delay_ms_p95": self.delay_ms_p95,
            "target_delay_ms_p95": self.target_ms_p95,
            "busy_max": self.busy_max,
            "cap": self.cap,
            "lag_ms": self.lag_ms,
            "verdict_on_time": verdict,
        }


def busy_spans(records: Sequence[RequestRecord]) -> list[tuple[float, float]]:
    """When each user was busy (wall clock): a request from its start to its end, an agent
    session from its first request's start to its last one's end; a request without an end
    (timed out, stalled, cut) busy to the end of the step."""
    spans: dict[str, tuple[float, float]] = {}
    for r in records:
        end = math.inf if r.e2e_s is None else r.started_at + r.e2e_s
        key = r.request_id if r.session_id is None else f"session:{r.session_id}"
        lo, hi = spans.get(key, (r.started_at, end))
        spans[key] = (min(lo, r.started_at), max(hi, end))
    return list(spans.values())


def schedule_lateness(
    records: Sequence[RequestRecord], cap: int | None, lag_ms: float = 0.0
) -> Lateness | None:
    """Split each open-loop schedule delay into the target's part and the client's.

    An arrival (a request, or a session's first) that was due while at least
    ``cap - BUSY_SLACK x cap`` users were busy (``busy_spans``) waited for a free
    user: its delay beyond the client's own loop lag ``lag_ms`` is the target's
    queueing.  One due while users were free went out late only because the load
    generator itself woke late: all of its delay is the client's.  Without ``cap`` (an
    older run) every delay counts as queueing, as it did.  None: no delays."""
    delayed = [r for r in records if r.schedule_delay_s is not None]
    if not delayed:
        return None
    spans = busy_spans(records)
    starts = sorted(s for s, _ in spans)
    ends = sorted(e for _, e in spans)
    line = None if cap is None else max(1, cap - int(cap * BUSY_SLACK))
    lag_s = max(0.0, lag_ms) / 1000.0
    target: list[RequestRecord] = []
    parts: list[float] = []
    busy_late: list[int] = []
    for r in records:
        delay = r.schedule_delay_s
        if delay is None:
            target.append(r)
            continue
        part = delay
        if delay > 0 and line is not None:
            due = r.started_at - delay
            busy = bisect_right(starts, due) - bisect_right(ends, due)
            if delay * 1000.0 > LATE_P95_MS:
                busy_late.append(busy)
            arrival = not r.step  # a session's later steps wait for nobody but the client
            part = max(0.0, delay - lag_s) if arrival and busy >= line else 0.0
        elif line is None:
            part = max(0.0, delay - lag_s)
        parts.append(part * 1000.0)
        target.append(r if part == delay else replace(r, schedule_delay_s=part))
    delays = sorted(r.schedule_delay_s * 1000.0 for r in delayed if r.schedule_delay_s is not None)
    return Lateness(
        delay_ms_p95=percentile(delays, 95),
        target_ms_p95=percentile(sorted(parts), 95),
        target_records=target,
        busy_max=max(busy_late) if busy_late else (None if cap is None else 0),
        cap=cap,
        busy_line=line,
        lag_ms=max(0.0, lag_ms),
    )
