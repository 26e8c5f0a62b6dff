"""The CI gate: is this run's percentile worse than the baseline's, beyond noise?

Method.  For each gated mode, the statistic is the ratio ``P_q(run) / P_q(baseline)``
of the ``q``-th percentiles (linear interpolation).  Its uncertainty comes from a
bootstrap that resamples *both* samples (``B`` resamples, fixed seed, so the same
inputs always give the same verdict).  With confidence ``c`` (default 0.95) the
one-sided bounds are the ``1-c`` and ``c`` quantiles of the bootstrap ratios.

* fail (exit 1): the lower bound exceeds ``1 + max_regression`` — the run is
  worse than allowed, with confidence; or an absolute limit is breached.
* inconclusive (exit 2): too few samples (fewer than ``max(30, 3 / (1 - q))``
  on either side), or the interval is so wide that it spans both "no change"
  (< 1) and twice the allowed regression — the run cannot tell them apart.
* pass (exit 0): otherwise.

The harness is checked before a failure is called: when the load generator was
starved in a gated phase (``reports.trust.starved``: CPU or event-loop lag above
the saturation line for too much of the phase), a failing check becomes
inconclusive (exit 2) with the numbers — a busy CI neighbour slows the client,
and that must not fail a good build.  A worker lost mid-run (records with status
``lost``) adds an inconclusive check: the load it was to apply went missing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.baseline import metric_values
from llmload.reports.loader import Run
from llmload.reports.trust import STARVED_SHARE, harness_delay_ms, starved

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
EXIT = {PASS: 0, FAIL: 1, INCONCLUSIVE: 2}
#: ``--inconclusive``: the exit code an inconclusive verdict gets (neutral: its own, 2)
INCONCLUSIVE_EXIT = {"neutral": EXIT[INCONCLUSIVE], "pass": EXIT[PASS], "fail": EXIT[FAIL]}
DEFAULT_SEED = 20240607
DEFAULT_RESAMPLES = 2000


@dataclass
class GateConfig:
    """What to gate and how strictly."""

    metric: str = "ttft"
    percentile: float = 95.0
    max_regression: float = 0.10
    confidence: float = 0.95
    max_ttft_p95_ms: float | None = None
    modes: list[str] | None = None
    min_samples: int | None = None
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    #: gate the latency from the intended send time (open loop: + schedule delay)
    from_intended: bool = False
    #: a failure is inconclusive when this share of a gated phase's samples was saturated
    starved_share: float = STARVED_SHARE
    #: exit-code policy for an inconclusive verdict: neutral (2), pass (0) or fail (1)
    inconclusive: str = "neutral"

    @property
    def key(self) -> str:
        """The baseline metric this gates (``ttft`` or ``ttft_from_intended``)."""
        return f"{self.metric}_from_intended" if self.from_intended else self.metric

    @property
    def label(self) -> str:
        """The metric as people read it."""
        return f"{self.metric} from intended send" if self.from_intended else self.metric

    def needed(self) -> int:
        """Minimum samples per side: at least 3 expected beyond the percentile, and 30."""
        if self.min_samples is not None:
            return self.min_samples
        tail = max(1.0 - self.percentile / 100.0, 1e-6)
        return max(30, math.ceil(3.0 / tail - 1e-9))


@dataclass
class Check:
    """One decision (a relative check per mode, or an absolute limit) with its numbers."""

    name: str
    verdict: str
    reason: str
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass
class GateResult:
    """All checks and the overall verdict (fail beats inconclusive beats pass)."""

    config: GateConfig
    checks: list[Check]
    run_name: str = ""
    baseline_name: str = ""

    @property
    def verdict(self) -> str:
        verdicts = {c.verdict for c in self.checks}
        if FAIL in verdicts:
            return FAIL
        if INCONCLUSIVE in verdicts or not self.checks:
            return INCONCLUSIVE
        return PASS

    @property
    def exit_code(self) -> int:
        """0 pass, 1 fail; inconclusive 2 unless ``config.inconclusive`` maps it to 0 or 1."""
        if self.verdict == INCONCLUSIVE:
            return INCONCLUSIVE_EXIT[self.config.inconclusive]
        return EXIT[self.verdict]


def bootstrap_ratio(
    base: np.ndarray, base_n: int, run: np.ndarray, run_n: int, q: float, resamples: int, seed: int
) -> np.ndarray:
    """Bootstrap distribution of ``P_q(run*) / P_q(base*)``; ``*_n`` is each resample's size."""
    rng = np.random.default_rng(seed)
    out = np.empty(resamples)
    chunk = max(1, 4_000_000 // max(base_n, run_n, 1))
    for start in range(0, resamples, chunk):
        k = min(chunk, resamples - start)
        b = base[rng.integers(0, base.size, size=(k, base_n))]
        r = run[rng.integers(0, run.size, size=(k, run_n))]
        out[start : start + k] = np.percentile(r, q, axis=1) / np.percentile(b, q, axis=1)
    return out


def ratio_bounds(ratios: Any, confidence: float) -> tuple[float, float]:
    """The one-sided ``confidence`` bounds of bootstrapped run/baseline ratios."""
    alpha = 1.0 - confidence
    lo, hi = (float(x) for x in np.quantile(ratios, [alpha, 1.0 - alpha]))
    return lo, hi


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


def relative_check(
    mode: str, base: dict[str, Any], run_vals: Sequence[float] | np.ndarray, cfg: GateConfig
) -> Check:
    """Compare one mode's run values against its baseline entry."""
    q, limit = cfg.percentile, 1.0 + cfg.max_regression
    name = f"{cfg.label} p{q:g} {mode}"
    bvals = np.asarray(base["values_ms"], dtype=float)
    bn, rn = int(base["n"]), len(run_vals)
    nums: dict[str, Any] = {
        "mode": mode,
        "baseline_n": bn,
        "run_n": rn,
        "max_regression_pct": cfg.max_regression * 100,
    }
    need = cfg.needed()
    if bn < need or rn < need:
        return Check(
            name,
            INCONCLUSIVE,
            f"too few samples for p{q:g}: baseline {bn}, run {rn} "
            f"(need at least {need} each; run longer)",
            nums,
        )
    rvals = np.asarray(run_vals, dtype=float)
    b_p = float(np.percentile(bvals, q))
    r_p = float(np.percentile(rvals, q))
    ratios = bootstrap_ratio(bvals, bn, rvals, rn, q, cfg.resamples, cfg.seed)
    lo, hi = ratio_bounds(ratios, cfg.confidence)
    conf = f"{cfg.confidence:.0%}"
    ratio = r_p / b_p if b_p > 0 else math.inf
    nums.update(baseline_ms=b_p, run_ms=r_p, **ratio_numbers(ratio, lo, hi, cfg))
    what = (
        f"p{q:g} {cfg.label} {mode}: {b_p:.1f} ms → {r_p:.1f} ms "
        f"({ratio_words(ratio, lo, hi, cfg.confidence)})"
    )
    allowed = f"allowed +{cfg.max_regression * 100:g}%"
    if lo > limit:
        return Check(
            name, FAIL, f"{what}: regression beyond {allowed} with {conf} confidence", nums
        )
    if lo < 1.0 and hi > 1.0 + 2 * cfg.max_regression:
        return Check(
            name,
            INCONCLUSIVE,
            f"{what}: too noisy to tell no change from twice the "
            f"{allowed}; run longer or on a quieter machine",
            nums,
        )
    if ratio > limit:
        return Check(
            name, PASS, f"{what}: above {allowed} but within noise (not significant)", nums
        )
    return Check(name, PASS, f"{what}: within {allowed}", nums)


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


def gated_modes(baseline: dict[str, Any], run: Run, cfg: GateConfig) -> list[str]:
    """The modes to gate: those asked for, else stream when both have it, else all shared."""
    base_modes = set(baseline["metrics"].get(cfg.key, {}))
    run_modes = set(run.measured.distinct("mode"))
    if cfg.modes:
        return list(cfg.modes)
    if "stream" in base_modes and "stream" in run_modes:
        return ["stream"]
    return sorted(base_modes | run_modes)


def evaluate(run: Run, baseline: dict[str, Any], cfg: GateConfig) -> GateResult:
    """Every check for ``run`` against ``baseline`` (pure apart from the seeded bootstrap)."""
    checks: list[Check] = []
    per_mode = baseline["metrics"].get(cfg.key, {})
    for mode in gated_modes(baseline, run, cfg):
        records = run.measured.where(run.measured.is_("mode", mode))
        vals = metric_values(records, cfg.key)
        missing = _missing(cfg, mode, mode in per_mode, records, vals)
        if missing:
            checks.append(Check(f"{cfg.label} {mode}", INCONCLUSIVE, missing))
            continue
        mode_checks = [relative_check(mode, per_mode[mode], vals, cfg)]
        if cfg.max_ttft_p95_ms is not None:
            ttft_key = "ttft_from_intended" if cfg.from_intended else "ttft"
            what = "ttft from intended send" if cfg.from_intended else "ttft"
            ttft = metric_values(records, ttft_key)
            mode_checks.append(absolute_check(mode, ttft, cfg.max_ttft_p95_ms, what))
        checks += [_unless_starved(c, run, mode, cfg) for c in mode_checks]
    lost = _lost(run)
    if lost:
        checks.append(Check("records complete", INCONCLUSIVE, lost))
    return GateResult(cfg, checks, run.name, str(baseline.get("source_run", "")))


def harness_doubt(run: Run, mode: str, share: float = STARVED_SHARE) -> tuple[str, float] | None:
    """Was the load generator starved in ``mode``'s phases: (why, its loop lag p99 in ms)."""
    for ph in run.meta.get("phases") or []:
        if not isinstance(ph, dict) or ph.get("mode") != mode or ph.get("name") == "warmup":
            continue
        health = ph.get("health") or {}
        why = starved(health, share, str(ph.get("name")))
        if why:
            return why, harness_delay_ms(health)
    return None


def _excess_ms(check: Check, cfg: GateConfig) -> float:
    """How far the run's percentile lies beyond what the check allows (ms)."""
    n = check.numbers
    if "limit_ms" in n:
        return float(n["run_ms"]) - float(n["limit_ms"])
    return float(n["run_ms"]) - float(n["baseline_ms"]) * (1.0 + cfg.max_regression)


def _unless_starved(check: Check, run: Run, mode: str, cfg: GateConfig) -> Check:
    """A failure the harness may have caused is inconclusive, with the harness's numbers.

    "May have caused": the client was starved in a gated phase *and* its own delay
    (loop lag p99) is at least the excess over what is allowed — take it away and the
    run might pass.  A regression larger than anything the client could add stands.
    """
    if check.verdict != FAIL:
        return check
    doubt = harness_doubt(run, mode, cfg.starved_share)
    if doubt is None:
        return check
    why, delay = doubt
    excess = _excess_ms(check, cfg)
    if delay < excess:
        note = (
            f" (the load generator was starved, but its own delay, loop lag p99 {delay:.0f} ms, "
            f"is less than the {excess:.0f} ms beyond what is allowed)"
        )
        return Check(check.name, FAIL, check.reason + note, {**check.numbers, "starved": True})
    reason = f"inconclusive: {why} — not calling this a regression ({check.reason})"
    return Check(check.name, INCONCLUSIVE, reason, {**check.numbers, "starved": True})


def _lost(run: Run) -> str:
    """Why the run's load is incomplete (a lost worker), empty when it is not."""
    lost = run.measured.where(run.measured.is_("status", "lost"))
    workers = run.meta.get("lost_workers") or []
    if not lost and not workers:
        return ""
    names = sorted({str(w.get("worker")) for w in workers if isinstance(w, dict)})
    names = names or sorted(lost.distinct("worker"))
    return (
        f"inconclusive: worker {', '.join(names)} was lost mid-run; {len(lost)} requests "
        "have no outcome and the load it was to apply went missing"
    )


def _missing(
    cfg: GateConfig,
    mode: str,
    in_base: bool,
    records: Sequence[RequestRecord],
    vals: Sequence[float] | np.ndarray,
) -> str:
    """Why ``mode`` cannot be gated at all (empty when it can)."""
    open_loop = "an open-loop run (loadtests --rate), which records each schedule delay"
    if not in_base:
        why = f"the baseline has no {cfg.key} values for mode {mode}"
        return why + (f"; make it from {open_loop}" if cfg.from_intended else "")
    if cfg.from_intended and len(records) and not len(vals):
        return f"the run has no schedule delays for mode {mode}: --from-intended needs {open_loop}"
    return ""
