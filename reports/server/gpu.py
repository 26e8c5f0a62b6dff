"""A phase's ``gpu`` block: the GPU exporter's figures, per GPU and summed, and energy per token.

Read from ``gpu_metrics.jsonl`` (``llmload.gpumetrics``; the roles and units are
``loadtests.gpufamilies``).  Shape (``summary.json``, each phase)::

    {"exporter": "dcgm", "name": "NVIDIA dcgm-exporter",
     "window": {"from": t, "to": t, "exact": true},    # the scrapes bounding the phase
     "gpus": {"node-a/0": {"util_pct_mean", "mem_used_mib_max", "power_w_mean",
                           "power_w_max", "sm_clock_mhz_mean", "temp_c_max",
                           "gr_active_mean", "sm_active_mean", "dram_active_mean",
                           "energy_j", "energy_source", "resets"}, ...},
     "all": {the same, summed over the GPUs (utilization, clocks, activity: their mean;
             temperature: the hottest; memory: the sum of each GPU's max)},
     "energy_j": J, "energy_source": "counter" | "power integrated" | "mixed",
     "output_tokens": n, "joules_per_output_token": J, "output_tokens_per_joule": x,
     "in_flight_mean": requests, "watts_per_request_in_flight": W,
     "scrapes": n, "gaps": [{"from_s", "to_s", "failed"}], "notes": [sentences]}

Energy is the energy counter's increase from the scrape at the phase's start to the
one at its end, reset-safe: a counter that goes down (the exporter or the driver
restarted) counts what it shows after the restart, as Prometheus's ``increase()``
does, and the phase says so (``resets``).  A GPU without an energy counter gets
its power draw integrated over the phase's scrapes (trapezoids; ``energy_source``
says so).  Failed scrapes are named as gaps; when no scrape ends the phase
(the exporter went away) its energy is unknown — ``None``, said in ``notes`` —
and nothing of the client's side is touched.  Joules per output token divide
the GPUs' summed energy by the phase's output tokens as the client counted
them; watts per request in flight divide the summed mean power by the mean
number of the phase's requests in flight.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmload.loadtests import gpufamilies
from llmload.reports.draw.charts import Series
from llmload.reports.draw.fmt import fmt_num
from llmload.reports.table.loader import Run
from llmload.reports.table.scrapes import Scrape, ServerRun

#: roles summed up by their mean (per GPU, then averaged over the GPUs for ``all``)
MEAN_ROLES = {
    "util": "util_pct_mean",
    "sm_clock": "sm_clock_mhz_mean",
    "gr_active": "gr_active_mean",
    "sm_active": "sm_active_mean",
    "dram_active": "dram_active_mean",
}


def _family(exp: gpufamilies.Exporter, role: str, have: set[str]) -> gpufamilies.GpuFamily | None:
    return next((f for f in exp.for_role(role) if f.name in have), None)


def _points(scrapes: list[Scrape], name: str, key: str) -> list[tuple[float, float]]:
    return [(s.t, s.sample.per[name][key]) for s in scrapes if key in s.sample.per.get(name, {})]


def increase(values: list[float]) -> tuple[float, int]:
    """A counter's increase over ``values`` (in order) and how many times it reset."""
    total, resets = 0.0, 0
    for a, b in zip(values, values[1:], strict=False):
        if b < a:
            resets += 1
            total += b  # it restarted from zero: what it shows now came after the restart
        else:
            total += b - a
    return total, resets


def integrate(points: list[tuple[float, float]]) -> float:
    """The area under ``(t, watts)`` (trapezoids): joules."""
    return sum(
        (t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(points, points[1:], strict=False)
    )


def window(
    gr: ServerRun, name: str, t0: float, t1: float
) -> tuple[Scrape | None, Scrape | None, bool]:
    """The scrapes at a phase's start and end (None: none answered), and whether they are
    its own (``mark``)."""
    ok = gr.scrapes
    start = next((s for s in ok if f"start {name}" in s.marks), None)
    end = next((s for s in ok if f"end {name}" in s.marks and s.t >= t0), None)
    exact = start is not None and end is not None
    if start is None:
        start = next((s for s in reversed(ok) if s.t <= t0), None)
    if end is None:
        end = next((s for s in ok if s.t >= t1), None)
    return start, end, exact


def gaps(gr: ServerRun, t0: float, t1: float, slack: float) -> list[dict[str, Any]]:
    """The failed scrapes near ``[t0, t1]``, grouped: each gap from the last scrape that
    answered before it to the first after it (``to_s`` None: none answered again)."""
    failed = sorted(t for t, _ in gr.failed if t0 <= t <= t1 + slack)
    out: list[dict[str, Any]] = []
    for t in failed:
        before = max((s.t for s in gr.scrapes if s.t < t), default=t0)
        after = min((s.t for s in gr.scrapes if s.t > t), default=None)
        if out and out[-1]["_before"] == before:
            out[-1]["failed"] += 1
            continue
        out.append(
            {
                "_before": before,
                "from_s": round(max(before, t0) - t0, 3),
                "to_s": None if after is None else round(after - t0, 3),
                "failed": 1,
            }
        )
    for g in out:
        del g["_before"]
    return out


def _gpu_figures(
    exp: gpufamilies.Exporter, inside: list[Scrape], bounds: list[Scrape] | None, key: str
) -> dict[str, Any]:
    have = {n for s in inside for n in s.sample.per if key in s.sample.per[n]}
    out: dict[str, Any] = {}

    def vals(role: str) -> list[float]:
        f = _family(exp, role, have)
        return [] if f is None else [v * f.scale for _, v in _points(inside, f.name, key)]

    for role, field in MEAN_ROLES.items():
        v = vals(role)
        if v:
            out[field] = float(np.mean(v))
    for role, field, fn in (("mem_used", "mem_used_mib_max", max), ("temp", "temp_c_max", max)):
        v = vals(role)
        if v:
            out[field] = float(fn(v))
    power = vals("power")
    if power:
        out["power_w_mean"] = float(np.mean(power))
        out["power_w_max"] = float(max(power))
    out["energy_j"], out["energy_source"], out["resets"] = None, None, 0
    if bounds is None:
        return out
    counter = _family(
        exp, "energy", {n for s in bounds for n in s.sample.per if key in s.sample.per[n]}
    )
    if counter is not None:
        pts = _points(bounds, counter.name, key)
        if len(pts) >= 2 and pts[0][0] == bounds[0].t and pts[-1][0] == bounds[-1].t:
            inc, resets = increase([v for _, v in pts])
            out.update(energy_j=inc * counter.scale, energy_source="counter", resets=resets)
            return out
    pf = _family(exp, "power", {n for s in bounds for n in s.sample.per if key in s.sample.per[n]})
    if pf is not None:
        pts = [(t, v * pf.scale) for t, v in _points(bounds, pf.name, key)]
        if len(pts) >= 2:
            out.update(energy_j=integrate(pts), energy_source="power integrated")
    return out


def _summed(
    gpus: dict[str, dict[str, Any]], exp: gpufamilies.Exporter, inside: list[Scrape]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    blocks = list(gpus.values())
    for field in MEAN_ROLES.values():
        v = [b[field] for b in blocks if field in b]
        if v:
            out[field] = float(np.mean(v))
    if any("mem_used_mib_max" in b for b in blocks):
        out["mem_used_mib_max"] = sum(b.get("mem_used_mib_max", 0.0) for b in blocks)
    if any("temp_c_max" in b for b in blocks):
        out["temp_c_max"] = max(b["temp_c_max"] for b in blocks if "temp_c_max" in b)
    pf = _family(exp, "power", {n for s in inside for n in s.sample.values})
    if pf is not None:
        total = [s.sample.values[pf.name] * pf.scale for s in inside if pf.name in s.sample.values]
        if total:
            out["power_w_mean"] = float(np.mean(total))
            out["power_w_max"] = float(max(total))
    energies = [b["energy_j"] for b in blocks]
    sources = {b["energy_source"] for b in blocks}
    known = bool(blocks) and all(e is not None for e in energies)
    out["energy_j"] = float(sum(energies)) if known else None
    out["energy_source"] = (
        (next(iter(sources)) if len(sources) == 1 else "mixed") if known else None
    )
    out["resets"] = sum(b["resets"] for b in blocks)
    return out


def in_flight_mean(run: Run, name: str, t0: float, t1: float) -> float | None:
    """The mean number of the phase's requests in flight over ``[t0, t1]``."""
    if t1 <= t0:
        return None
    recs = run.measured.where(run.measured.is_("phase", name))
    if not len(recs):
        return None
    start = recs.num("started_at")
    end = start + np.nan_to_num(recs.num("e2e_s"), nan=0.0)
    overlap = np.clip(np.minimum(end, t1) - np.maximum(start, t0), 0.0, None)
    return float(overlap.sum() / (t1 - t0))


def phase_block(
    gr: ServerRun, name: str, t0: float, t1: float, tokens: int, in_flight: float | None
) -> dict[str, Any] | None:
    """The phase's ``gpu`` block (see the module docstring); None when no scrape saw it."""
    exp = gpufamilies.detect(gr.names())
    if exp is None:
        return None
    start, end, exact = window(gr, name, t0, t1)
    lo = start.t if start is not None else t0
    hi = end.t if end is not None else t1
    inside = gr.between(lo, hi)
    if not inside:
        return None
    bounds = inside if start is not None and end is not None else None
    keys = sorted({k for s in inside for per in s.sample.per.values() for k in per})
    gpus = {k: _gpu_figures(exp, inside, bounds, k) for k in keys}
    total = _summed(gpus, exp, inside)
    interval = float(gr.meta.get("interval_s") or 1.0)
    notes: list[str] = []
    holes = gaps(gr, t0, t1, 2 * interval)
    for g in holes:
        until = f"{g['to_s']:g} s" if g["to_s"] is not None else "the end (it never answered again)"
        notes.append(
            f"the exporter did not answer {g['failed']} time(s): from {g['from_s']:g} s to {until}"
        )
    if bounds is None:
        notes.append("energy unknown: no scrape of the exporter bounds the phase")
    if total["resets"]:
        notes.append(
            f"an energy counter reset {total['resets']} time(s) (the exporter or driver "
            "restarted): energy counts from the restart, never negative"
        )
    if total["energy_source"] in ("power integrated", "mixed"):
        notes.append("no energy counter on some GPU: its power draw is integrated over the scrapes")
    energy = total["energy_j"]
    out: dict[str, Any] = {
        "exporter": exp.key,
        "name": exp.name,
        "window": {"from": lo, "to": hi, "exact": exact},
        "gpus": gpus,
        "all": total,
        "energy_j": energy,
        "energy_source": total["energy_source"],
        "output_tokens": tokens,
        "joules_per_output_token": energy / tokens if energy is not None and tokens else None,
        "output_tokens_per_joule": tokens / energy if energy else None,
        "in_flight_mean": in_flight,
        "watts_per_request_in_flight": (
            total["power_w_mean"] / in_flight if in_flight and "power_w_mean" in total else None
        ),
        "scrapes": len(inside),
        "gaps": holes,
        "notes": notes,
    }
    return out


def run_block(gr: ServerRun) -> dict[str, Any]:
    """``summary.json``'s ``gpu_metrics``: the source, how scraping went, the GPUs seen."""
    exp = gpufamilies.detect(gr.names())
    return {
        "url": gr.meta.get("url"),
        "status": gr.status,
        "reason": gr.meta.get("reason"),
        "interval_s": gr.meta.get("interval_s"),
        "exporter": exp.key if exp else None,
        "name": exp.name if exp else None,
        "gpus": sorted({k for s in gr.scrapes for per in s.sample.per.values() for k in per}),
        "scrapes": len(gr.scrapes),
        "failed": len(gr.failed),
        "last_error": gr.failed[-1][1] if gr.failed else None,
        "corrupt_lines": gr.corrupt_lines,
        "families": sorted(gr.names()),
    }


def phase_lines(name: str, block: dict[str, Any]) -> list[str]:
    """A phase's GPU figures in words (the terminal, summary.md)."""
    a = block["all"]
    n = len(block["gpus"])
    parts = []
    if "power_w_mean" in a:
        parts.append(f"power mean {fmt_num(a['power_w_mean'])} W (max {fmt_num(a['power_w_max'])})")
    if "util_pct_mean" in a:
        parts.append(f"util {fmt_num(a['util_pct_mean'])} %")
    if block["energy_j"] is not None:
        parts.append(f"energy {fmt_num(block['energy_j'])} J ({block['energy_source']})")
    if block["joules_per_output_token"] is not None:
        parts.append(
            f"{fmt_num(block['joules_per_output_token'])} J/output token "
            f"({fmt_num(block['output_tokens_per_joule'])} tokens/J)"
        )
    if block["watts_per_request_in_flight"] is not None:
        parts.append(f"{fmt_num(block['watts_per_request_in_flight'])} W per request in flight")
    lines = [f"{name}: {n} GPU(s), {block['name']}: " + ", ".join(parts)]
    if n > 1:
        for key, g in block["gpus"].items():
            e = g["energy_j"]
            lines.append(
                f"  {key}: power mean {fmt_num(g.get('power_w_mean'))} W, "
                f"energy {'unknown' if e is None else fmt_num(e) + ' J'}"
            )
    lines += [f"  {note}" for note in block["notes"]]
    return lines


def gpu_lines(phases: dict[str, Any]) -> list[str]:
    """Every phase's GPU lines (phases: name -> ``PhaseStats``)."""
    out: list[str] = []
    for name, g in phases.items():
        block = g.extra.get("gpu")
        if block:
            out += phase_lines(name, block)
    return out


def series(gr: ServerRun, t0: float) -> tuple[list[Series], list[Series]]:
    """Power (W: each GPU, and their sum) and utilization (%: each GPU) per scrape, on the
    client charts' axis (seconds since ``t0``); empty when the exporter gave neither."""
    exp = gpufamilies.detect(gr.names())
    if exp is None:
        return [], []
    have = gr.names()
    keys = sorted({k for s in gr.scrapes for per in s.sample.per.values() for k in per})
    out: list[list[Series]] = []
    for role in ("power", "util"):
        f = _family(exp, role, have)
        drawn: list[Series] = []
        if f is not None:
            for key in keys:
                pts = [(t - t0, v * f.scale) for t, v in _points(gr.scrapes, f.name, key)]
                drawn.append(Series(f"GPU {key}", pts, "line"))
            if role == "power" and len(keys) > 1:
                pts = [
                    (s.t - t0, s.sample.values[f.name] * f.scale)
                    for s in gr.scrapes
                    if f.name in s.sample.values
                ]
                drawn.append(Series("all GPUs", pts, "line", "#d62728", dashed=True))
        out.append([s for s in drawn if s.points])
    return out[0], out[1]


def cumulative_energy(gr: ServerRun) -> tuple[np.ndarray, np.ndarray]:
    """The GPUs' summed energy since the first scrape, J, at each scrape's time: each GPU's
    counter increase (reset-safe), or its power integrated where it has no counter — the
    curve the gate's ``energy`` metric reads a second at a time (empty: no exporter)."""
    exp = gpufamilies.detect(gr.names())
    scrapes = gr.scrapes
    if exp is None or len(scrapes) < 2:
        return np.zeros(0), np.zeros(0)
    have = gr.names()
    counter, power = _family(exp, "energy", have), _family(exp, "power", have)
    keys = sorted({k for s in scrapes for per in s.sample.per.values() for k in per})
    steps = np.zeros(len(scrapes) - 1)
    for key in keys:
        for i, (a, b) in enumerate(zip(scrapes, scrapes[1:], strict=False)):
            if counter is not None and key in a.sample.per.get(counter.name, {}):
                va = a.sample.per[counter.name][key]
                vb = b.sample.per.get(counter.name, {}).get(key)
                if vb is not None:
                    steps[i] += increase([va, vb])[0] * counter.scale
                    continue
            if power is not None:
                pa = a.sample.per.get(power.name, {}).get(key)
                pb = b.sample.per.get(power.name, {}).get(key)
                if pa is not None and pb is not None:
                    steps[i] += integrate([(a.t, pa * power.scale), (b.t, pb * power.scale)])
    times = np.asarray([s.t for s in scrapes])
    return times, np.concatenate([[0.0], np.cumsum(steps)])
