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
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmload.loadtests.durations import parse_fraction
from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.run.capacity import RATIO_CAP
from llmload.loadtests.slo import METRICS, parse_duration_ms
from llmload.reports.arraystats import percentile_sorted
from llmload.reports.columns import RecordTable
from llmload.reports.stats import percentile

DEFAULT_GOODPUT = 0.95
#: a step with more failed requests than this share saturated the target
MAX_ERROR_SHARE = 0.05
#: open loop: the step kept less than this share of its schedule (requests sent late or never)
KEPT_SCHEDULE_SHARE = 0.9
#: open loop: a p95 schedule delay above this means requests waited for a free user
LATE_P95_MS = 50.0
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
    return value * 1000.0  # type: ignore[no-any-return]


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
    against a one-token answer), read from the records' columns (``reports.columns``)."""
    return _scores(RecordTable.of(records), c, open_loop).tolist()  # type: ignore[no-any-return]


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
) -> dict[str, Any]:
    """One step: its curve point (latencies, throughput, errors), criteria, verdict, saturation.

    ``scheduled``: open loop, how many arrivals the step's schedule held.
    """
    t = RecordTable.of(records)
    ok = t.ok()
    n, n_ok = len(t), int(ok.sum())
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
    point: dict[str, Any] = {
        "requests": n,
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
    delays = np.sort(t.num("schedule_delay_s") * 1000)
    delays = delays[~np.isnan(delays)]
    if len(delays):
        point["schedule_delay_ms_p95"] = percentile_sorted(delays, 95)
    queue = t.num("server_queue_s")[ok] * 1000
    queue = np.sort(queue[~np.isnan(queue)])
    if len(queue):
        point["server_queue_ms_p95"] = percentile_sorted(queue, 95)
    point["saturated"] = _saturation(point, open_loop, scheduled)
    growing, growth = _growing(t, criteria, open_loop) if open_loop else ("", 0.0)
    if growing:
        # above the target's capacity an open-loop queue grows for as long as the step
        # lasts: a short step can still look fine on average, but it is not sustained
        point["saturated"].append(growing)
        point["verdict"] = "fail"
    # how far beyond the SLO the step was, in ms: more than a client's own delay can explain
    tightest = min(v for c in criteria for v in c.bounds_ms.values())
    beyond = max(0.0, (point["ratio"] or 0.0) - 1.0, growth)
    point["beyond_slo_ms"] = beyond * tightest
    return point


def explained_by_client(point: dict[str, Any], health: dict[str, Any]) -> bool:
    """Could a starved load generator alone have failed this step?  Each timestamp it took
    was late by at most its worst event-loop lag, so a failure by more than that stands."""
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


def _saturation(point: dict[str, Any], open_loop: bool, scheduled: int | None) -> list[str]:
    """Why this step shows a target that stopped keeping up (empty: it kept up)."""
    why = []
    if point["requests"] and point["error_rate"] > MAX_ERROR_SHARE:
        why.append(f"errors: {point['error_rate']:.0%} of requests failed")
    if open_loop:
        late = point.get("schedule_delay_ms_p95")
        if scheduled and point["requests"] < KEPT_SCHEDULE_SHARE * scheduled:
            why.append(f"schedule: {point['requests']} of {scheduled} scheduled requests sent")
        elif late is not None and late > LATE_P95_MS:
            why.append(f"queueing: schedule delay p95 {late:.0f} ms (every user busy)")
    return why
