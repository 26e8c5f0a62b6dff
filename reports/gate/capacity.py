"""The CI gate on capacity: did the load this deployment sustains drop beyond noise?

``reports gate RUN --baseline B --metric capacity`` compares two capacity
searches (``llmload capacity``).  A baseline keeps, per step, the load and each
request's SLO scores (value / bound per criterion, ``reports.capacity.judge``).

Method — the TTFT gate's, applied to the capacity estimate.  The estimate is
where the SLO ratio (the worst criterion's observed quantile over its bound)
crosses 1 along the step curve, interpolated between the highest load below 1
and the next load above it.  A seeded bootstrap resamples every step's
requests on both sides, recomputes both curves and both estimates, and gives
the distribution of ``capacity(run) / capacity(baseline)``; its one-sided
bounds at ``confidence`` decide:

* fail: the upper bound is below ``1 - max_regression`` (dropped, with confidence);
* inconclusive: the interval spans both "no change" and twice the allowed drop;
  or a side found no crossing (every step passed, or none did); or a search's
  final bracket is wider than twice the allowed drop (the search was too coarse);
* pass otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmload.loadtests.run.capacity import RATIO_CAP, crossing
from llmload.reports.capacity.curve import capacity_doc
from llmload.reports.gate.verdict import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    Check,
    GateConfig,
    GateResult,
    ratio_bounds,
    ratio_numbers,
    ratio_words,
)
from llmload.reports.table.loader import Run

__all__ = ["capacity_check", "capacity_doc", "estimate", "evaluate_capacity"]


def estimate(loads: list[float], ratios: list[float]) -> float | None:
    """Where the ratio curve first crosses 1 (None when it never does, or starts above it)."""
    pairs = sorted(zip(loads, ratios, strict=True))
    for i, (x, r) in enumerate(pairs):
        if r > 1.0:
            if i == 0:
                return None
            x0, r0 = pairs[i - 1]
            return crossing(x0, r0, x, r)
    return None


def _ratios(doc: dict[str, Any], rng: np.random.Generator | None) -> list[float]:
    """Each step's worst criterion ratio (resampled when ``rng`` is given)."""
    out = []
    for step in doc["steps"]:
        cols = [np.asarray(col, dtype=float) for col in step["scores"]]
        n = cols[0].size if cols else 0
        if n == 0:
            out.append(RATIO_CAP)
            continue
        idx = rng.integers(0, n, size=n) if rng is not None else slice(None)
        qs = [
            float(np.percentile(col[idx], q * 100.0))
            for col, q in zip(cols, doc["quantiles"], strict=True)
        ]
        out.append(max(qs))
    return out


def _too_coarse(doc: dict[str, Any], cfg: GateConfig) -> str:
    ans = doc.get("answer") or {}
    lo, hi = ans.get("lo"), ans.get("hi")
    if lo is None or hi is None or hi <= 0:
        return ""
    width = (hi - lo) / hi
    return f"bracket {lo:g}..{hi:g} ({width:.0%} wide)" if width > 2 * cfg.max_regression else ""


def capacity_check(run_doc: dict[str, Any], base_doc: dict[str, Any], cfg: GateConfig) -> Check:
    """The one capacity check of the gate."""
    name = "capacity"
    unit = run_doc.get("unit") or ""
    loads_r = [s["load"] for s in run_doc["steps"]]
    loads_b = [s["load"] for s in base_doc["steps"]]
    cap_r = estimate(loads_r, _ratios(run_doc, None))
    cap_b = estimate(loads_b, _ratios(base_doc, None))
    nums: dict[str, Any] = {
        "unit": unit,
        "baseline": cap_b,
        "run": cap_r,
        "max_regression_pct": cfg.max_regression * 100,
    }
    if cap_r is None or cap_b is None:
        side = "run" if cap_r is None else "baseline"
        return Check(
            name,
            INCONCLUSIVE,
            f"the {side}'s steps never cross the SLO (all passed, or none did): "
            f"no capacity estimate to compare; widen the search (--max / --min)",
            nums,
        )
    coarse = _too_coarse(run_doc, cfg) or _too_coarse(base_doc, cfg)
    rng = np.random.default_rng(cfg.seed)
    ratios = []
    for _ in range(cfg.resamples):
        r = estimate(loads_r, _ratios(run_doc, rng))
        b = estimate(loads_b, _ratios(base_doc, rng))
        if r is not None and b is not None and b > 0:
            ratios.append(r / b)
    if len(ratios) < cfg.resamples / 2:
        return Check(name, INCONCLUSIVE, "most resamples found no crossing: too noisy", nums)
    lo, hi = ratio_bounds(ratios, cfg.confidence)
    conf = f"{cfg.confidence:.0%}"
    change = cap_r / cap_b
    nums.update(ratio_numbers(change, lo, hi, cfg))
    what = (
        f"capacity: {cap_b:.3g} → {cap_r:.3g} {unit} "
        f"({ratio_words(change, lo, hi, cfg.confidence)})"
    )
    allowed = f"allowed −{cfg.max_regression * 100:g}%"
    floor = 1.0 - cfg.max_regression
    if hi < floor:
        return Check(name, FAIL, f"{what}: dropped beyond {allowed} with {conf} confidence", nums)
    if coarse:
        return Check(
            name,
            INCONCLUSIVE,
            f"{what}: the search was too coarse to tell ({coarse}); rerun with a smaller "
            f"--tolerance",
            nums,
        )
    if hi > 1.0 and lo < 1.0 - 2 * cfg.max_regression:
        return Check(
            name,
            INCONCLUSIVE,
            f"{what}: too noisy to tell no change from twice the {allowed}; more requests "
            f"per step (--step-requests) or a quieter machine",
            nums,
        )
    if change < floor:
        return Check(name, PASS, f"{what}: below {allowed} but within noise", nums)
    return Check(name, PASS, f"{what}: within {allowed}", nums)


def evaluate_capacity(run: Run, baseline: dict[str, Any], cfg: GateConfig) -> GateResult:
    """``reports gate --metric capacity``."""
    base_doc = baseline.get("capacity")
    run_doc = capacity_doc(run)
    if not isinstance(base_doc, dict) or run_doc is None:
        side = "baseline" if not isinstance(base_doc, dict) else "run"
        why = f"the {side} is not a capacity search (make both with `llmload capacity`)"
        return GateResult(cfg, [Check("capacity", INCONCLUSIVE, why)], run.name)
    check = capacity_check(run_doc, base_doc, cfg)
    return GateResult(cfg, [check], run.name, str(baseline.get("source_run", "")))
