"""The curve of a capacity search: the answer in words, the knee, throughput plateaus, and
what ``summary.json`` and the capacity gate keep of a capacity run (``run.json``'s block).

Each step is judged by ``reports.capacity.judge.judge``; this module works across steps.

Units of load (run.json's ``capacity.unit``): ``req/s`` and ``users``; ``sessions/s``
(agent sessions, open loop; closed loop their users are ``users``); ``speedup`` (a
trace replayed at that many times its pace: the answer also says what request rate
that is, from the trace's own rate, ``capacity.trace.rate_per_s``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.run.capacity import RATIO_CAP
from llmload.reports.capacity.judge import Criterion, judge, scores
from llmload.reports.draw.fmt import fmt_ms
from llmload.reports.server import gpu
from llmload.reports.server.saturation import server_saturation
from llmload.reports.table.columns import RecordTable
from llmload.reports.table.steady import steady_part
from llmload.reports.table.trust import harness_delay_ms, phase_health
from llmload.reports.workloads.measure import agent_sessions

#: closed loop: more users adding less than this share of throughput is a plateau
PLATEAU_GAIN = 0.05
#: stop reasons that leave the bracket wider than the tolerance
EARLY = ("budget", "harness", "max_steps")
#: the unit of a search over a trace replay's pace
SPEEDUP = "speedup"


def client_note(verdict: str) -> str:
    """What a step whose load generator fell behind its own schedule counts for."""
    if verdict == "unreliable":
        return "; it failed by no more than the client's own delay: not evidence about the target"
    if verdict == "pass":
        return "; a pass still counts (the client only adds delay)"
    return "; the failure stands beyond the client's own delay"


def is_open_loop(capacity: dict[str, Any]) -> bool:
    """Was the search open loop (latency from the intended send time)?  Older runs say it
    by their unit alone."""
    if "open_loop" in capacity:
        return bool(capacity["open_loop"])
    return capacity.get("unit") == "req/s"


def session_point(records: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """Agent sessions of a step: how many, how many reached their final answer, and the time
    to it (ms, p50/p95; from the intended start too, open loop); None without sessions."""
    block = agent_sessions(records)
    if block is None:
        return None
    out: dict[str, Any] = {
        "sessions": block["sessions"],
        "complete": block["complete"],
        "session_ms": {k: block["session_ms"].get(k) for k in ("p50", "p95")},
    }
    intended = block.get("session_from_intended_ms")
    if intended:
        out["session_from_intended_ms"] = {k: intended.get(k) for k in ("p50", "p95")}
    return out


def plateau(
    point: dict[str, Any], load: float, earlier: Sequence[tuple[float, dict[str, Any]]]
) -> str:
    """Closed loop: '' or why ``load`` users gave no more throughput than clearly fewer did
    (shown on the curve; closed loop limits itself, so the search goes on to the SLO)."""
    below = [(x, p) for x, p in earlier if x <= 0.8 * load and p.get("throughput_per_s")]
    if not below:
        return ""
    x, best = max(below, key=lambda xp: xp[1]["throughput_per_s"])
    if point["throughput_per_s"] <= (1 + PLATEAU_GAIN) * best["throughput_per_s"]:
        return (
            f"plateau: {point['throughput_per_s']:.2f} req/s at {load:g} users, "
            f"{best['throughput_per_s']:.2f} already at {x:g}"
        )
    return ""


def knee(points: Sequence[tuple[float, float]]) -> float | None:
    """The load where a rising latency curve bends most (Kneedle: the largest gap below the
    chord of the normalised curve); None with fewer than 3 points or no rise."""
    pts = sorted(points)
    if len(pts) < 3:
        return None
    (x0, y0), (x1, y1) = pts[0], pts[-1]
    if x1 <= x0 or y1 <= y0:
        return None
    gaps = [((x - x0) / (x1 - x0) - (y - y0) / (y1 - y0), x) for x, y in pts[1:-1]]
    best, at = max(gaps)
    return at if best > 0 else None


def fmt_load(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    if unit == "users":
        return f"{value:.0f}"
    if unit == SPEEDUP:
        return f"{value:.3g}×"
    return f"{value:.3g}"


def load_text(value: float | None, unit: str) -> str:
    """A load with its unit: ``8 users``, ``7.5 req/s``, ``2 sessions/s``, ``3.2×``."""
    if unit == SPEEDUP:
        return fmt_load(value, unit)
    return f"{fmt_load(value, unit)} {unit}"


def _amount(value: float | None, capacity: dict[str, Any]) -> str:
    """What a load means in the answer: ``8 users``; ``the trace at 3.2× its pace``."""
    unit = capacity.get("unit", "req/s")
    if unit == SPEEDUP:
        return f"the trace at {fmt_load(value, unit)} its pace"
    return load_text(value, unit)


def _per_s(value: float | None, capacity: dict[str, Any]) -> str:
    """A trace's speedup as requests/s (``≈ 12.8 req/s``, from its rate at 1x); else ''."""
    rate = (capacity.get("trace") or {}).get("rate_per_s")
    if capacity.get("unit") != SPEEDUP or not rate or value is None:
        return ""
    return f"≈ {value * rate:.3g} req/s"


def answer_text(capacity: dict[str, Any], curve: Sequence[dict[str, Any]]) -> str:
    """``sustains 7.5 req/s (between 7.0 and 8.0) at p95 TTFT ≤ 600 ms; at 8.0 p95 TTFT is
    910 ms`` (``capacity``: run.json's capacity block; ``curve``: its judged steps)."""
    ans = capacity.get("answer") or {}
    unit = capacity.get("unit", "req/s")
    slo = " and ".join(Criterion(c["quantile"], c["bounds_ms"]).text for c in capacity["criteria"])
    lo, hi, est = ans.get("lo"), ans.get("hi"), ans.get("estimate")
    reason = ans.get("reason", "")
    tail = _at_hi(hi, unit, curve)
    if lo is None:
        if hi is None:
            return f"no capacity found ({reason})"
        rate = f" ({r})" if (r := _per_s(hi, capacity)) else ""
        return f"does not sustain even {_amount(hi, capacity)}{rate} at {slo}" + tail
    if hi is None:
        why = {
            "maximum": "the highest load allowed",
            "saturated": "where the target stopped keeping up",
            "harness": "where the load generator ran out of room",
            "budget": "when the budget ran out",
        }.get(reason, reason)
        rate = f" ({r})" if (r := _per_s(lo, capacity)) else ""
        return (
            f"sustains at least {_amount(lo, capacity)}{rate} at {slo} "
            f"({why}; no failing load found)" + _inputs_at(lo, unit, curve)
        )
    early = f" (stopped early: {ans['why']})" if reason in EARLY and ans.get("why") else ""
    rate = f"{r}; " if (r := _per_s(est, capacity)) else ""
    return (
        f"sustains {_amount(est, capacity)} ({rate}between {fmt_load(lo, unit)} and "
        f"{fmt_load(hi, unit)}) at {slo}" + _inputs_at(lo, unit, curve) + tail + early
    )


def _inputs_at(load: float, unit: str, curve: Sequence[dict[str, Any]]) -> str:
    """``; 95.1 inputs/s served at 12 users`` — embeddings or rerank, whose requests each
    carry ``--batch-size`` inputs: what the sustained step served ('' for other runs)."""
    got = [p["inputs_per_s"] for p in curve if p.get("load") == load and "inputs_per_s" in p]
    if not got:
        return ""
    return f"; {got[-1]:.3g} inputs/s served at {load_text(load, unit)}"


def _at_hi(hi: float | None, unit: str, curve: Sequence[dict[str, Any]]) -> str:
    """``; at 8.0 p95 TTFT is 910 ms`` — the criterion that failed there."""
    if hi is None:
        return ""
    step = next((p for p in curve if p.get("load") == hi), None)
    if step is None:
        return ""
    bad = [c for c in step["criteria"] if c["verdict"] != "pass"] or step["criteria"]
    worst = max(bad, key=lambda c: c["ratio"] if c["ratio"] is not None else math.inf)
    where = f"; at {fmt_load(hi, unit)}"
    if step.get("saturated") and (step.get("ratio") or 0.0) <= 1.0:
        return f"{where} the target did not keep up ({step['saturated'][0]})"
    if worst["observed_ms"] is not None:
        name = worst["text"].split(" ≤ ")[0]
        return f"{where} {name} is {fmt_ms(worst['observed_ms'])} ms"
    share = worst.get("share_within")
    if share is None:
        return ""
    return f"{where} only {share:.0%} of requests were within bounds"


def capacity_summary(run: Any) -> dict[str, Any] | None:
    """``summary.json``'s ``capacity`` block: the curve re-judged from the records, the answer,
    the knee; None when the run was not a capacity search."""
    block = run.meta.get("capacity")
    if not isinstance(block, dict) or not isinstance(block.get("steps"), list):
        return None
    criteria = [Criterion(float(c["quantile"]), dict(c["bounds_ms"])) for c in block["criteria"]]
    open_loop = is_open_loop(block)
    by_phase = _by_phase(run.records)
    curve = []
    point_conf = float(block.get("confidence", 0.95))
    # whose a schedule delay was needs the cap (an older run has none: every delay queueing)
    cap = block.get("concurrency_cap") if open_loop else None
    healths = phase_health(run.meta)
    for step in block["steps"]:
        lag = step.get("client_lag_ms")
        if lag is None:
            lag = harness_delay_ms(healths.get(step["phase"]) or {})
        point = judge(
            by_phase.get(step["phase"], RecordTable.of([])),
            criteria,
            point_conf,
            duration_s=float(step.get("duration_s") or step.get("wall_s") or 1.0),
            open_loop=open_loop,
            scheduled=step.get("scheduled"),
            cap=cap,
            client_lag_ms=float(lag) if cap is not None else 0.0,
        )
        pooled_with = [p for p in step.get("pooled_with") or [] if p in by_phase]
        if pooled_with:  # a step run again (too close to call): judged on both runs
            t = run.records
            pool = t.where(t.is_any("phase", [*pooled_with, step["phase"]]))
            both = judge(pool, criteria, point_conf, duration_s=1.0, open_loop=open_loop)
            for key in ("criteria", "verdict", "ratio"):
                point[key] = both[key]
            point["pooled_with"] = pooled_with
        window = _phase_times(run.meta, step.get("phase"))
        recs = by_phase.get(step["phase"])
        if run.server is not None and window is not None and recs is not None:
            scrapes = [(s.t, s.sample) for s in run.server.scrapes]
            last = float(recs.num("started_at").max())
            point["saturated"] += server_saturation(
                scrapes, window[0], last, window[1], growing=open_loop
            )
        if run.gpu is not None and window is not None and recs is not None:
            point.update(_energy(run, str(step["phase"]), window, recs))
        extra = {k: step.get(k) for k in ("phase", "load", "why", "search_verdict", "starved")}
        if step.get("plateau"):
            point["plateau"] = step["plateau"]
        sessions = session_point(recs) if recs is not None else None
        if sessions is not None:
            point["sessions"] = sessions
        curve.append({**extra, **point})
    answer = block.get("answer") or {}
    return {
        "search": block.get("search"),
        "unit": block.get("unit"),
        "open_loop": open_loop,
        "trace": block.get("trace"),
        "mode": block.get("mode"),
        "slo": block.get("slo"),
        "criteria": block["criteria"],
        "slo_text": " and ".join(c.text for c in criteria),
        "confidence": block.get("confidence"),
        "tolerance": block.get("tolerance"),
        "budget_s": block.get("budget_s"),
        "elapsed_s": block.get("elapsed_s"),
        "status": block.get("status"),
        "answer": answer,
        "text": answer_text(block, curve) if answer else "search did not finish",
        "steps": len(curve),
        "knee": knee([(p["load"], p["ratio"]) for p in curve if p.get("ratio") is not None]),
        "curve": curve,
    }


def _energy(run: Any, phase: str, window: tuple[float, float], recs: RecordTable) -> dict[str, Any]:
    """A step's GPU energy per token (``reports.server.gpu``): ``{}`` when none was measured."""
    ok = recs.where(recs.ok())
    tokens = int(np.nansum(ok.num("output_tokens"))) if len(ok) else 0
    block = gpu.phase_block(run.gpu, phase, *window, tokens, None)
    if block is None or block["output_tokens_per_joule"] is None:
        return {}
    return {
        "output_tokens_per_joule": block["output_tokens_per_joule"],
        "joules_per_output_token": block["joules_per_output_token"],
        "gpu_power_w_mean": block["all"].get("power_w_mean"),
    }


def _by_phase(t: RecordTable) -> dict[str, RecordTable]:
    """A run's records by phase (selections of its table)."""
    return {p: t.where(t.is_("phase", p)) for p in t.distinct("phase")}


def _phase_times(meta: dict[str, Any], name: Any) -> tuple[float, float] | None:
    for ph in meta.get("phases") or []:
        if isinstance(ph, dict) and ph.get("name") == name:
            try:
                return float(ph["started_at"]), float(ph["ended_at"])
            except (KeyError, TypeError, ValueError):
                return None
    return None


def capacity_doc(run: Any) -> dict[str, Any] | None:
    """What the capacity gate keeps of a run (``reports.gate.capacity``, baselines): the loads,
    each request's scores per criterion (rounded, capped), the answer.  A search made with
    ``--warmup auto`` keeps each step's steady part only (``reports.table.steady.steady_part``)."""
    block = run.meta.get("capacity")
    if not isinstance(block, dict) or not block.get("steps"):
        return None
    criteria = [Criterion(float(c["quantile"]), dict(c["bounds_ms"])) for c in block["criteria"]]
    open_loop = is_open_loop(block)
    by_load: dict[float, list[Sequence[RequestRecord]]] = {}
    t = run.records
    for step in block["steps"]:
        if step.get("search_verdict") == "unreliable":
            continue  # a starved load generator measured nothing about the server
        # a step run again at the same load (too close to call) pools with the first run
        step_recs: Sequence[RequestRecord] = t.where(t.is_("phase", step["phase"]))
        if block.get("warmup") == "auto":  # each step judged on its steady part: so gated
            step_recs = steady_part(step_recs)[0]
        by_load.setdefault(step["load"], []).append(step_recs)
    steps = []
    for load, parts in by_load.items():  # (a request's scores are its own: part by part)
        per = [[s for part in parts for s in scores(part, c, open_loop)] for c in criteria]
        rows = [[round(min(s, RATIO_CAP), 4) for s in col] for col in per]
        steps.append({"load": load, "n": sum(len(part) for part in parts), "scores": rows})
    return {
        "unit": block.get("unit"),
        "criteria": block["criteria"],
        "quantiles": [c.quantile for c in criteria],
        "answer": block.get("answer"),
        "steps": steps,
    }
