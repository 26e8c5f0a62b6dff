"""The CI gate: is this run worse than the baseline on any gated metric, beyond noise?

Method.  Each gated metric (``--metric ttft,itl,throughput``; ``reports.gate.metrics``)
is compared per mode — over all requests and, when a mode has several
scenarios, per scenario — as a change: the ratio ``stat(run) / stat(baseline)``
of a latency's percentile or a rate's mean per second, or the error rate's
difference in points.  Its uncertainty comes from a seeded bootstrap that
resamples *both* sides (``reports.gate.bootstrap``; same inputs, same verdict).

One verdict for all of them, with the family-wise confidence kept: each check's
p-value for "no worse than allowed" is the bootstrap share on the allowed side,
and **Holm–Bonferroni** over every check (``reports.gate.holm``) decides which fail
at ``1 - confidence`` — gating five metrics raises no more false alarms than
gating one.  The bounds shown are simultaneous (Bonferroni: each at
``(1 - confidence) / m``).

* fail (exit 1): a check Holm rejects — worse than allowed, with confidence; or
  an absolute limit breached.
* inconclusive (exit 2): too few samples (a latency: fewer than
  ``max(30, 3 / (1 - q))``; a rate: 5 seconds; the error rate: 30 requests), an
  interval that spans both "no change" and twice the allowance, a baseline that
  is not comparable (``reports.gate.fingerprint``), a failure the load generator may
  have caused (``reports.gate.doubt``), or a lost worker.  A scenario's own check
  that cannot be judged (too few or too noisy on its own) is *skipped*: shown,
  not counted — the mode's check over all requests stands for it.
* pass (exit 0): otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from llmload.reports.gate.bootstrap import (
    GROUPED_EFFECT,
    Comparison,
    Side,
    bootstrap_ratio,
    compare,
    effective_n,
    ratio_bounds,
)
from llmload.reports.gate.doubt import harness_doubt, unless_starved
from llmload.reports.gate.fingerprint import baseline_fingerprint, comparability, fingerprint
from llmload.reports.gate.holm import bonferroni_level, holm_adjusted
from llmload.reports.gate.metrics import LATENCY, RATE, SHARE, MetricSpec
from llmload.reports.gate.result import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    EXIT,
    FAIL,
    INCONCLUSIVE,
    INCONCLUSIVE_EXIT,
    PASS,
    SKIPPED,
    Check,
    GateConfig,
    GateResult,
)
from llmload.reports.gate.sides import ALL, BaselineSide, RecordsSide, paired_sides
from llmload.reports.gate.spread import spread
from llmload.reports.server.versus import gate_lines
from llmload.reports.table.loader import Run

__all__ = [
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "EXIT",
    "FAIL",
    "INCONCLUSIVE",
    "INCONCLUSIVE_EXIT",
    "PASS",
    "SKIPPED",
    "Check",
    "GateConfig",
    "GateResult",
    "bootstrap_ratio",
    "evaluate",
    "evaluate_paired",
    "evaluate_sides",
    "harness_doubt",
    "ratio_bounds",
]

Sided = RecordsSide | BaselineSide


def ratio_numbers(ratio: float, lo: float, hi: float, cfg: Any) -> dict[str, float]:
    """A check's numbers for a ratio and its bounds (``cfg``: confidence, resamples, seed)."""
    return {
        "change_pct": (ratio - 1) * 100,
        "ci_low_pct": (lo - 1) * 100,
        "ci_high_pct": (hi - 1) * 100,
        "confidence": cfg.confidence,
        "resamples": cfg.resamples,
        "seed": cfg.seed,
    }


def ratio_words(ratio: float, lo: float, hi: float, confidence: float) -> str:
    """``+12.3%; 95% one-sided bounds +5.0% … +20.1%``."""
    return (
        f"{(ratio - 1) * 100:+.1f}%; {confidence:.0%} one-sided bounds "
        f"{(lo - 1) * 100:+.1f}% … {(hi - 1) * 100:+.1f}%"
    )


def gated_modes(run: Sided, base: Sided, cfg: GateConfig) -> list[str]:
    """The modes to gate: those asked for, else stream when both have it, else all shared."""
    if cfg.modes:
        return list(cfg.modes)
    run_modes, base_modes = run.modes(), base.modes()
    if "stream" in base_modes and "stream" in run_modes:
        return ["stream"]
    return sorted(base_modes | run_modes)


def _scopes(run: Sided, base: Sided, mode: str) -> list[str]:
    names = list(dict.fromkeys([*base.scenarios(mode), *run.scenarios(mode)]))
    return [ALL, *names] if len(names) > 1 else [ALL]


def check_name(spec: MetricSpec, mode: str, scope: str) -> str:
    """``ttft p95 stream``, ``throughput stream · code_gen``."""
    return f"{spec.name} {mode}" + ("" if scope == ALL else f" · {scope}")


def _sample(side: Sided, spec: MetricSpec, mode: str, scope: str) -> Side | None:
    kind, name = spec.metric.kind, spec.metric.name
    if kind == LATENCY:
        return side.latency(name, mode, scope)
    if kind == RATE:
        series = side.rates(name, mode, scope)
        return None if series is None else Side.of(series)
    counts = side.outcomes(mode, scope)
    if counts is None:
        return None
    n, failed = counts
    return Side(np.asarray([float(failed)]), n)


def _missing(spec: MetricSpec, mode: str, scope: str, which: str) -> str:
    where = f"mode {mode}" + ("" if scope == ALL else f", scenario {scope}")
    metric = spec.metric.name
    if metric == "energy":
        return (
            f"the {which} has no GPU energy for {where}: it needs a GPU exporter scraped during "
            "the run (--gpu-metrics) with every second's tokens"
        )
    if which == "baseline":
        why = f"the baseline has no {metric} values for {where}"
        if metric.endswith("_from_intended"):
            why += "; make it from an open-loop run (loadtests --rate), which records each "
            why += "schedule delay"
        elif spec.metric.kind != LATENCY or scope != ALL:
            why += " (a baseline from an older llmload: write it again with `report baseline`)"
        return why
    if metric.endswith("_from_intended"):
        return (
            f"the run has no schedule delays for {where}: --from-intended needs an open-loop "
            "run (loadtests --rate), which records each schedule delay"
        )
    return f"the run has no {metric} values for {where}"


def _one(
    spec: MetricSpec, mode: str, scope: str, run: Sided, base: Sided, cfg: GateConfig
) -> Comparison | Check:
    """The comparison of one metric, mode and scope, or the check that says why there is none."""
    name = check_name(spec, mode, scope)
    verdict = INCONCLUSIVE if scope == ALL else SKIPPED
    nums: dict[str, Any] = {"metric": spec.metric.name, "mode": mode, "scope": scope}
    b, r = _sample(base, spec, mode, scope), _sample(run, spec, mode, scope)
    if b is None or r is None:
        return Check(
            name,
            verdict,
            _missing(spec, mode, scope, "baseline" if b is None else "run"),
            nums,
        )
    need = cfg.needed(spec)
    nums.update(baseline_n=b.n, run_n=r.n)
    if b.n < need or r.n < need:
        unit = {LATENCY: "samples", RATE: "seconds", SHARE: "requests"}[spec.metric.kind]
        stat = f"p{spec.percentile:g}" if spec.percentile is not None else spec.metric.name
        return Check(
            name,
            verdict,
            f"too few {unit} for {stat} {mode}"
            + ("" if scope == ALL else f" · {scope}")
            + f": baseline {b.n}, run {r.n} (need at least {need} each; run longer)",
            nums,
        )
    if not cfg.grouped:
        b, r = Side(b.values, b.n), Side(r.values, r.n)
    return compare(spec, mode, scope, b, r, cfg.resamples, cfg.seed)


def _value(c: Comparison, x: float) -> str:
    unit = c.spec.metric.unit
    if c.is_share:
        return f"{x * 100:.1f}%"
    if unit == "ms":
        return f"{x:.1f} ms"
    return f"{x:.4g} {unit}"


def _change(c: Comparison, x: float) -> str:
    return f"{c.pct(x):+.1f} points" if c.is_share else f"{c.pct(x):+.1f}%"


def _decide(c: Comparison, p_holm: float, m: int, cfg: GateConfig) -> Check:
    """One comparison's verdict: Holm-rejected fails; a wide interval is inconclusive."""
    spec = c.spec
    alpha = 1.0 - cfg.confidence
    lo, hi = c.bounds(bonferroni_level(alpha, m))
    conf = f"{cfg.confidence:.0%}"
    where = f"{c.mode}" + ("" if c.scope == ALL else f" · {c.scope}")
    stat = (
        f"p{spec.percentile:g} {spec.metric.name.replace('_from_intended', ' from intended send')}"
        if spec.percentile is not None
        else spec.metric.label
    )
    bounds = (
        f"{conf} one-sided bounds"
        if m == 1
        else f"{conf} family-wise bounds (Bonferroni over {m} checks)"
    )
    what = (
        f"{stat} {where}: {_value(c, c.base_value)} → {_value(c, c.run_value)} "
        f"({_change(c, c.change)}; {bounds} {_change(c, lo)} … {_change(c, hi)})"
    )
    grouped = max(c.base_effect, c.run_effect) > GROUPED_EFFECT
    if grouped:
        what += (
            f"; a request's gaps move together, so its {c.base_n:,} / {c.run_n:,} gaps count as "
            f"{effective_n(c.base_n, c.base_effect):,} / {effective_n(c.run_n, c.run_effect):,} "
            f"independent ones (design effect {c.base_effect:.1f} / {c.run_effect:.1f})"
        )
    allowed = f"allowed {spec.allowed_text}"
    nums: dict[str, Any] = {
        "metric": spec.metric.name,
        "percentile": spec.percentile,
        "kind": spec.metric.kind,
        "mode": c.mode,
        "scope": c.scope,
        "unit": spec.metric.unit,
        "harm": spec.metric.harm,
        "baseline": c.base_value,
        "run": c.run_value,
        "baseline_n": c.base_n,
        "run_n": c.run_n,
        "baseline_design_effect": c.base_effect,
        "run_design_effect": c.run_effect,
        "baseline_n_effective": effective_n(c.base_n, c.base_effect),
        "run_n_effective": effective_n(c.run_n, c.run_effect),
        "allowed": spec.allowed,
        "max_regression_pct": spec.allowed * 100,
        "change_pct": c.pct(c.change),
        "ci_low_pct": c.pct(lo),
        "ci_high_pct": c.pct(hi),
        "p_value": c.p_value(),
        "p_holm": p_holm,
        "family": m,
        "confidence": cfg.confidence,
        "resamples": cfg.resamples,
        "seed": cfg.seed,
    }
    resolves = c.resolves(bonferroni_level(alpha, m))
    nums["resolves_pct"] = c.pct(resolves)
    nums["beyond"] = c.harmful(c.change)
    if spec.metric.kind == LATENCY:
        nums.update(baseline_ms=c.base_value, run_ms=c.run_value)
    if not c.is_share:
        nums.update(ratio=c.change, ratio_low=lo, ratio_high=hi)
    name = check_name(spec, c.mode, c.scope)
    worse = "drop" if spec.metric.harm == "down" else "regression"
    if p_holm <= alpha:
        holm = "" if m == 1 else f" (Holm over {m} checks)"
        return Check(
            name, FAIL, f"{what}: {worse} beyond {allowed} with {conf} confidence{holm}", nums
        )
    noisy = c.harmful(lo if spec.metric.harm == "down" else hi, by=2.0) and not c.harmful(
        hi if spec.metric.harm == "down" else lo, by=0.0
    )
    if noisy:
        verdict = INCONCLUSIVE if c.scope == ALL else SKIPPED
        return Check(
            name,
            verdict,
            f"{what}: too noisy to tell no change from twice the {allowed}; "
            + (
                "run longer or on a quieter machine"
                if c.scope == ALL
                else "judged over all requests of the mode instead"
            ),
            nums,
        )
    # what the sample could have caught: a pass on a sample that resolves only twice the
    # allowance says little (the number beside the verdict, not another rule)
    resolution = f"; this sample fails a change from about {_change(c, resolves)}"
    if c.harmful(c.change):
        return Check(
            name,
            PASS,
            f"{what}: beyond {allowed} but within noise (not significant){resolution}",
            nums,
        )
    return Check(name, PASS, f"{what}: within {allowed}{resolution}", nums)


def decide_family(comps: Sequence[Comparison], cfg: GateConfig) -> list[Check]:
    """Every comparison's check, judged as one family: Holm–Bonferroni on their p-values."""
    adjusted = holm_adjusted([c.p_value() for c in comps])
    return [_decide(c, p, len(comps), cfg) for c, p in zip(comps, adjusted, strict=True)]


def absolute_check(
    mode: str, vals: Sequence[float] | np.ndarray, limit_ms: float, what: str = "ttft"
) -> Check:
    """``--max-ttft-p95-ms``: the run's TTFT p95 (``what``: which TTFT) against a fixed limit."""
    name = f"{what} p95 {mode} <= {limit_ms:g} ms"
    if not len(vals):
        return Check(name, INCONCLUSIVE, f"no successful {mode} requests to check", {"mode": mode})
    p95 = float(np.percentile(np.asarray(vals), 95))
    nums = {"mode": mode, "run_ms": p95, "limit_ms": limit_ms, "run_n": len(vals)}
    what = what.replace("ttft", "TTFT")
    if p95 > limit_ms:
        return Check(
            name, FAIL, f"{what} p95 {mode} {p95:.1f} ms exceeds the limit {limit_ms:g} ms", nums
        )
    return Check(
        name, PASS, f"{what} p95 {mode} {p95:.1f} ms within the limit {limit_ms:g} ms", nums
    )


def evaluate_sides(
    run: Run,
    side: RecordsSide,
    base: Sided,
    cfg: GateConfig,
    baseline_name: str = "",
    differences: Sequence[dict[str, Any]] = (),
) -> GateResult:
    """Every check of ``side`` (the run's records) against ``base``, in one family."""
    specs = cfg.specs()
    items: list[tuple[Comparison | Check, MetricSpec, str]] = []
    for mode in gated_modes(side, base, cfg):
        for spec in specs:
            # the GPUs' joules are the whole load's: no scenario has its own
            scopes = [ALL] if spec.metric.name == "energy" else _scopes(side, base, mode)
            for scope in scopes:
                items.append((_one(spec, mode, scope, side, base, cfg), spec, mode))
    decided = iter(decide_family([x for x, _, _ in items if isinstance(x, Comparison)], cfg))
    checks: list[Check] = []
    for item, spec, mode in items:
        if isinstance(item, Check):
            checks.append(item)
            continue
        check = next(decided)
        records = side.group(mode, item.scope)
        checks.append(unless_starved(check, run, records, mode, spec, cfg.starved_share))
    if cfg.max_ttft_p95_ms is not None:
        key = "ttft_from_intended" if cfg.from_intended else "ttft"
        what = "ttft from intended send" if cfg.from_intended else "ttft"
        for mode in gated_modes(side, base, cfg):
            got = side.latency(key, mode, ALL)
            check = absolute_check(mode, got.values if got else [], cfg.max_ttft_p95_ms, what)
            records = side.group(mode)
            checks.append(unless_starved(check, run, records, mode, specs[0], cfg.starved_share))
    blocking = [d for d in differences if d.get("blocking")]
    if blocking:
        keys = ", ".join(str(d["key"]) for d in blocking)
        said = "; ".join(str(d["text"]) for d in blocking)
        checks.insert(
            0,
            Check(
                "comparable runs",
                INCONCLUSIVE,
                f"inconclusive: the run is not comparable with the baseline — {said}; a "
                f"difference alone can move the metrics (accept it with --allow-difference "
                f"{blocking[0]['key']} if it is meant)",
                {"differences": keys},
            ),
        )
    lost = _lost(run)
    if lost:
        checks.append(Check("records complete", INCONCLUSIVE, lost))
    return GateResult(
        cfg, checks, run.name, baseline_name, list(differences), spread(run, specs, side)
    )


def evaluate(run: Run, baseline: dict[str, Any], cfg: GateConfig) -> GateResult:
    """Every check for ``run`` against a baseline document (pure but for the seeded bootstrap)."""
    base = BaselineSide(baseline)
    side = RecordsSide(run, slo=baseline.get("goodput_slo"))
    diffs = comparability(
        fingerprint(run.meta),
        baseline_fingerprint(baseline),
        cfg.allow_difference,
    )
    result = evaluate_sides(run, side, base, cfg, base.name, [d.to_dict() for d in diffs])
    result.server = gate_lines(run, baseline, gated_modes(side, base, cfg))
    return result


def evaluate_paired(run: Run, cfg: GateConfig) -> GateResult:
    """A run made with ``--baseline-target``: its target's phases against the baseline
    target's, run in turn (A/B, B/A, …) in the same process on the same machine."""
    sides = paired_sides(run)
    if sides is None:
        raise ValueError(
            f"{run.path} has no --baseline-target phases: give --baseline FILE "
            "(`llmload report baseline` writes one)"
        )
    side, base = sides
    info = run.meta.get("baseline_target") or {}
    base_meta = {k: v for k, v in run.meta.items() if k not in ("model", "server")}
    base_meta.update({k: info[k] for k in ("model", "server") if info.get(k) is not None})
    diffs = comparability(fingerprint(run.meta), fingerprint(base_meta), cfg.allow_difference)
    name = f"--baseline-target {info.get('target', '')} (same run)"
    result = evaluate_sides(run, side, base, cfg, name, [d.to_dict() for d in diffs])
    result.spread += spread(run, cfg.specs(), base, "baseline")
    return result


def _lost(run: Run) -> str:
    """Why the run's load is incomplete (a lost worker), empty when it is not."""
    t = run.measured
    lost = t.where(t.is_("status", "lost"))
    workers = run.meta.get("lost_workers") or []
    if not len(lost) and not workers:
        return ""
    names = sorted({str(w.get("worker")) for w in workers if isinstance(w, dict)})
    names = names or sorted(lost.distinct("worker"))
    return (
        f"inconclusive: worker {', '.join(names)} was lost mid-run; {len(lost)} requests "
        "have no outcome and the load it was to apply went missing"
    )
