"""A baseline as a history of runs, and the gate that holds across runs.

The gate's bootstrap covers the sampling inside one run.  Runs of an unchanged
build differ by more than that (the machine, warm caches, a server's life), so a
verdict about the *next* run needs the spread between runs.  Here each gated
check is decided on **run-level values** — the check's statistic (a latency's
percentile, a rate's mean per second, the error share) of each run:

* the baseline side is the last ``K`` comparable runs of a history (a folder of
  baseline files, one per run, that ``llmload report baseline RUN --history DIR``
  appends to: a CI job keeps it as an artifact or cache), or the one baseline file;
  a baseline made of a ``--repeat N`` run gives each of its repeats (``baseline_runs``);
* the run's side is the run, or each of its ``--repeat`` phases;
* on the log scale (a share: in points), the difference of the two sides' means
  is judged against the allowance with a pooled two-sample t interval: the
  run-level spread ``s`` pooled over both sides (degrees of freedom ``df`` =
  runs − 2), standard error ``s * sqrt(1/K + 1/N)``.  Each run-level value
  carries its own run's sampling error and the between-run variation alike, so
  the interval covers both; with few runs the t quantile says how much wider
  that makes it (``width``: t over the normal quantile).
* One verdict for all checks: Holm–Bonferroni over their p-values, as the
  single-run gate does.

A ``--baseline-target`` run with ``--repeat`` 2 or more is decided on its **pairs**
(``paired_level``): each repeat's value against its twin's on the baseline target,
run one after the other, so the machine's drift, which moves both, cancels in their
difference; the mean difference in a paired t interval (``pairs - 1`` degrees of
freedom) whose spread is how much one pair's difference strays from the next.

Where neither side has two runs (one baseline run, one run) the between-run
variance cannot be estimated: ``between_note`` says which variance is missing
and how to get it, and the gate's bootstrap verdict stands with that caveat.

Assumptions (docs/reports.md): the history's runs are independent and alike
(stationary) apart from sampling; a shift inside the history (``llmload report
history`` finds those) or a history from another machine breaks that.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmload.loadtests.run.phases import BASELINE_PREFIX
from llmload.reports.gate.baseline import BaselineError, make_baseline, read_baseline
from llmload.reports.gate.doubt import unless_starved
from llmload.reports.gate.fingerprint import baseline_fingerprint, comparability, fingerprint
from llmload.reports.gate.holm import bonferroni_level, holm_adjusted
from llmload.reports.gate.metrics import LATENCY, RATE, SHARE, MetricSpec
from llmload.reports.gate.result import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    SKIPPED,
    Check,
    GateConfig,
    GateResult,
    between_note,
)
from llmload.reports.gate.sampling import sampling_error
from llmload.reports.gate.sides import (
    ALL,
    BaselineSide,
    RecordsSide,
    paired_sides,
    repeat_phases,
)
from llmload.reports.gate.verdict import (
    check_name,
    evaluate,
    evaluate_paired,
    gated_modes,
)
from llmload.reports.table.loader import Run
from llmload.reports.table.tdist import t_ppf, t_sf
from llmload.reports.table.trust import STEAL_AMBER_PCT, run_steal

#: comparable runs of a history the gate reads (the most recent)
DEFAULT_LAST = 10
#: how often a check must fail a change of twice its allowance to be said to see one
DETECT_POWER = 0.95
#: the most runs a suggestion names; beyond it the spread itself must come down
MOST_RUNS = 100
#: how many times longer a suggestion may make each phase (paired runs)
LONGER = (2, 3, 4, 6, 8, 10, 15, 20)


# -- the history on disk -------------------------------------------------------------------


def append(run: Run, folder: Path, label: str = "", commit: str = "") -> Path:
    """Add ``run``'s baseline to the history in ``folder``; the new file's path."""
    doc = make_baseline(run)
    now = time.time()
    # the order runs were added in: created_at has whole seconds, CI can add two in one
    doc["history"] = {"label": label or run.name, "commit": commit, "appended_at": now}
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
    path = folder / f"{stamp}-{run.name}.json"
    n = 1
    while path.exists():
        n += 1
        path = folder / f"{stamp}-{run.name}-{n}.json"
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
    return path


@dataclass
class History:
    """A history's readable entries (oldest first) and what could not be read."""

    folder: Path
    entries: list[dict[str, Any]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def read(folder: Path) -> History:
    """Every baseline file in ``folder`` in the order it was added (a file from elsewhere:
    by its ``created_at``, before those); a corrupt one is skipped and named."""
    if not folder.is_dir():
        raise BaselineError(f"history {folder} is not a folder (`report baseline --history`)")
    out = History(folder)
    dated = []
    for path in sorted(folder.glob("*.json")):
        try:
            doc = read_baseline(path)
        except BaselineError as exc:
            out.skipped.append(f"{path.name}: {exc}")
            continue
        added = (doc.get("history") or {}).get("appended_at")
        order = float(added) if isinstance(added, int | float) else 0.0
        dated.append((order, str(doc.get("created_at", "")), path.name, doc))
    for *_, name, doc in sorted(dated, key=lambda t: (t[0], t[1], t[2])):
        out.entries.append(doc)
        out.names.append(name)
    return out


def comparable(
    history: History, meta: dict[str, Any], allow: list[str], last: int
) -> tuple[list[dict[str, Any]], list[str]]:
    """The last ``last`` entries comparable with a run (``meta``: its run.json), and a note
    per entry left out, naming the difference."""
    run_fp = fingerprint(meta)
    kept, left = [], []
    for name, doc in zip(history.names, history.entries, strict=True):
        blocking = [
            d for d in comparability(run_fp, baseline_fingerprint(doc), allow) if d.blocking
        ]
        if blocking:
            left.append(f"{name} ({'; '.join(d.text for d in blocking)})")
        else:
            kept.append(doc)
    return kept[-last:], left


# -- run-level values and the interval ------------------------------------------------------


def run_value(side: RecordsSide | BaselineSide, spec: MetricSpec, mode: str) -> float | None:
    """A side's statistic for a check, over all its requests of ``mode`` (None: it has none)."""
    kind, name = spec.metric.kind, spec.metric.name
    if kind == LATENCY:
        got = side.latency(name, mode, ALL)
        if got is None or not got.n:
            return None
        return float(np.percentile(got.values, float(spec.percentile or 95.0)))
    if kind == RATE:
        series = side.rates(name, mode, ALL)
        return float(np.mean(series)) if series else None
    counts = side.outcomes(mode, ALL)
    return None if counts is None or not counts[0] else counts[1] / counts[0]


@dataclass(frozen=True)
class RunLevel:
    """A check decided on run-level values: the change, its standard error, the spread."""

    spec: MetricSpec
    mode: str
    base: list[float]
    run: list[float]
    worse: float  # how much worse the run is, on the check's scale (log ratio or points)
    se: float
    df: int
    spread: float  # the pooled run-to-run standard deviation on that scale
    #: repeats run in turn on two targets (``--baseline-target``): ``base[i]`` and ``run[i]``
    #: are a pair, and ``spread`` is the standard deviation of the pairs' differences
    paired: bool = False
    #: paired: how many earlier paired runs (a history) the spread was pooled with
    earlier: int = 0
    #: paired: one standard deviation of a pair's difference from its phases' own
    #: requests' sampling error alone (``reports.gate.sampling``); None: not told
    sampling: float | None = None

    @property
    def is_share(self) -> bool:
        return self.spec.metric.kind == SHARE

    def allowed(self) -> float:
        """The allowance on the check's scale (a drop of 10 %: −log 0.9, as the bootstrap
        check's ratio limit of 0.9)."""
        return self._scaled(self.spec.allowed)

    def _scaled(self, allowed: float) -> float:
        if self.is_share:
            return allowed
        if self.spec.metric.harm == "down":
            return -math.log1p(-allowed) if allowed < 1 else math.inf
        return math.log1p(allowed)

    def p_value(self) -> float:
        """P-value of "no worse than allowed"."""
        if self.se == 0:
            return 0.0 if self.worse > self.allowed() else 1.0
        return t_sf((self.worse - self.allowed()) / self.se, self.df)

    def bounds(self, level: float) -> tuple[float, float]:
        """The one-sided bounds of ``worse`` at ``level`` each side."""
        half = t_ppf(1.0 - level, self.df) * self.se
        return self.worse - half, self.worse + half

    def width(self, level: float) -> float:
        """How much wider few runs make the interval: the t quantile over the normal's."""
        return t_ppf(1.0 - level, self.df) / t_ppf(1.0 - level, math.inf)

    def twice(self) -> float:
        """Twice the allowance on the check's scale (+20 % for +10 % allowed): the change
        the gate must see, and where its "inconclusive" begins."""
        return self._scaled(2 * self.spec.allowed)

    def fails_from(self, level: float) -> float:
        """The smallest change this check fails (its bound then reaches the allowance): a
        true change there fails about half the time."""
        return self.allowed() + t_ppf(1.0 - level, self.df) * self.se

    def power(self, level: float, change: float | None = None) -> float:
        """The chance that a true ``change`` (default: twice the allowance) fails this check,
        the t statistic shifted by it (the noncentral t read as a shifted central one)."""
        change = self.twice() if change is None else change
        return _power(change - self.allowed(), self.se, self.df, level)

    def runs_needed(self, level: float) -> tuple[int | None, int | None]:
        """At this spread, to fail twice the allowance ``DETECT_POWER`` of the time: the
        fewest history runs that do with this many runs of the build, else the runs of
        each build (``--repeat N``, the history's ``DEFAULT_LAST`` builds made alike: N
        runs each); paired (``--baseline-target``): the fewest pairs. None where not within
        ``MOST_RUNS``."""
        gap, s, n, k = self.twice() - self.allowed(), self.spread, len(self.run), len(self.base)
        if self.paired:  # x pairs: the mean difference's error is s / sqrt(x)
            known = self.df - (n - 1)  # the history's degrees of freedom
            pairs = (x for x in range(1, MOST_RUNS + 1) if self._pairs_do(gap, s, x, known, level))
            return None, next(pairs, None)

        def enough(k: int, n: int) -> bool:
            return _power(gap, s * math.sqrt(1.0 / k + 1.0 / n), k + n - 2, level) >= DETECT_POWER

        history = next((x for x in range(2, MOST_RUNS + 1) if enough(x, n)), None)
        if history is not None:
            return history, n
        each = (x for x in range(n, MOST_RUNS + 1) if enough(max(k, DEFAULT_LAST * x), x))
        return None, next(each, None)

    @staticmethod
    def _pairs_do(gap: float, s: float, pairs: int, known: int, level: float) -> bool:
        df = known + pairs - 1
        return df >= 1 and _power(gap, s / math.sqrt(pairs), df, level) >= DETECT_POWER

    def excess(self) -> float | None:
        """Paired: the part of the pairs' spread beyond their requests' sampling error
        (what longer phases would not shrink); None where the sampling error is not told."""
        if self.sampling is None:
            return None
        return math.sqrt(max(0.0, self.spread**2 - self.sampling**2))

    def longer_phases(self, level: float) -> int | None:
        """Paired: how many times longer each phase must run (``--duration``), with these
        pairs, to fail twice the allowance ``DETECT_POWER`` of the time — the sampling
        part of the spread shrinking with the phases' requests, the excess not (1: they
        already do); None where no length within ``LONGER`` would do, or the split is
        not told."""
        excess = self.excess()
        if excess is None or self.sampling is None:
            return None
        gap, n = self.twice() - self.allowed(), len(self.run)
        for k in (1, *LONGER):
            se = math.sqrt((self.sampling**2 / k + excess**2) / n)
            if _power(gap, se, self.df, level) >= DETECT_POWER:
                return k
        return None

    def sample(self) -> str:
        """What the interval stands on: ``5 baseline runs, 1 run(s)`` or ``3 pairs``."""
        if self.paired and self.earlier:
            return (
                f"{len(self.run)} pair(s) run in turn on the two targets, the spread pooled "
                f"with {self.earlier} earlier paired runs"
            )
        if self.paired:
            return f"{len(self.run)} pairs run in turn on the two targets"
        return f"{len(self.base)} baseline runs, {len(self.run)} run(s)"

    def spread_shown(self, x: float) -> str:
        """A spread on the check's scale as people read it: ``12.3%`` or ``1.0 points``."""
        return f"{x * 100:.1f} points" if self.is_share else f"{math.expm1(x) * 100:.1f}%"

    def spread_name(self) -> str:
        return "spread of the pairs' differences" if self.paired else "run-to-run spread"

    def change(self, x: float) -> float:
        """A value on the check's scale (how much worse) as the metric's own change: a
        fraction (run / baseline − 1; a drop is negative), a share's in its units."""
        if self.is_share:
            return x
        return math.expm1(-x if self.spec.metric.harm == "down" else x)

    def shown(self, x: float) -> str:
        """A change on the check's scale as people read it: +12.3% (a drop: −), +1.0 points."""
        if self.is_share:
            return f"{x * 100:+.1f} points"
        return f"{self.change(x) * 100:+.1f}%"


def _power(gap: float, se: float, df: int, level: float) -> float:
    """P(a check fails) when the true change lies ``gap`` beyond the allowance."""
    if se == 0:
        return 1.0 if gap > 0 else 0.0
    return t_sf(t_ppf(1.0 - level, df) - gap / se, df)


def run_level(
    spec: MetricSpec, mode: str, base: Sequence[float], run: Sequence[float]
) -> RunLevel | None:
    """The pooled comparison of run-level values; None when neither side has two runs."""
    share = spec.metric.kind == SHARE
    if not share and (min(base, default=0) <= 0 or min(run, default=0) <= 0):
        return None
    b = np.asarray(base, float) if share else np.log(np.asarray(base, float))
    r = np.asarray(run, float) if share else np.log(np.asarray(run, float))
    df = len(b) + len(r) - 2
    if df < 1 or not len(b) or not len(r):
        return None
    s2 = float(((b - b.mean()) ** 2).sum() + ((r - r.mean()) ** 2).sum()) / df
    diff = float(r.mean() - b.mean())
    worse = -diff if spec.metric.harm == "down" else diff
    se = math.sqrt(s2 * (1.0 / len(b) + 1.0 / len(r)))
    return RunLevel(spec, mode, list(base), list(run), worse, se, df, math.sqrt(s2))


def paired_level(
    spec: MetricSpec,
    mode: str,
    base: Sequence[float],
    run: Sequence[float],
    earlier: Sequence[Sequence[float]] = (),
    sampling: Sequence[float] | None = None,
) -> RunLevel | None:
    """Repeats run in turn on two targets (``--baseline-target``): ``run[i]`` and
    ``base[i]`` ran one after the other, so the machine's drift, which moves both alike,
    cancels in their difference.  The change is the mean of the pairs' differences (log
    scale; a share: points), its error their standard deviation over ``sqrt(pairs)``: a
    paired t interval.  ``earlier``: the pairs' differences of earlier paired runs (a
    history, ``pair_differences``), each taken about its own run's mean — what those
    builds changed drops out, how much one pair strays from the next stays — pooled with
    this run's into the spread, their degrees of freedom added.  ``sampling``: each
    pair's difference's variance from its phases' requests alone (``sampling_error`` of
    both, squared and added), kept to tell the spread's parts apart; it does not enter
    the interval.  None without a degree of freedom (one pair and no history) or
    without a value."""
    if len(base) != len(run) or not run:
        return None
    d = differences(spec, base, run)
    if d is None:
        return None
    ss = float(((d - d.mean()) ** 2).sum())
    df = len(d) - 1
    for e in earlier:
        if len(e) > 1:
            x = np.asarray(e, float)
            ss += float(((x - x.mean()) ** 2).sum())
            df += len(x) - 1
    if df < 1:
        return None
    sd = math.sqrt(ss / df)
    worse = float(-d.mean() if spec.metric.harm == "down" else d.mean())
    return RunLevel(
        spec,
        mode,
        list(base),
        list(run),
        worse,
        sd / math.sqrt(len(d)),
        df,
        sd,
        paired=True,
        earlier=sum(len(e) > 1 for e in earlier),
        sampling=math.sqrt(statistics.fmean(sampling)) if sampling else None,
    )


def paired_outlook(
    spec: MetricSpec, mode: str, earlier: Sequence[Sequence[float]], pairs: int
) -> RunLevel | None:
    """What a new paired run of ``pairs`` pairs gated against a history of paired runs
    (``earlier``: each one's pairs' differences) can see: the history's pooled spread
    (each run about its own mean), the new run's pairs assumed to stray alike and to
    add their degrees of freedom; no change.  None where the history has no degree of
    freedom."""
    runs = [np.asarray(e, float) for e in earlier if len(e) > 1]
    df = sum(len(x) - 1 for x in runs)
    if df < 1 or pairs < 1:
        return None
    sd = math.sqrt(sum(float(((x - x.mean()) ** 2).sum()) for x in runs) / df)
    ones = [1.0] * pairs
    return RunLevel(
        spec,
        mode,
        ones,
        ones,
        0.0,
        sd / math.sqrt(pairs),
        df + pairs - 1,
        sd,
        paired=True,
        earlier=len(runs),
    )


def differences(spec: MetricSpec, base: Sequence[float], run: Sequence[float]) -> np.ndarray | None:
    """``run[i] - base[i]`` on the check's scale (log; a share: points); None when a
    latency or rate is not positive."""
    b, r = np.asarray(base, float), np.asarray(run, float)
    if spec.metric.kind == SHARE:
        return r - b
    if len(b) and min(b.min(), r.min()) <= 0:
        return None
    return np.log(r) - np.log(b)


def decide(levels: Sequence[RunLevel], cfg: GateConfig) -> list[Check]:
    """Every run-level check, one family: Holm–Bonferroni on their p-values."""
    alpha = 1.0 - cfg.confidence
    m = len(levels)
    adjusted = holm_adjusted([x.p_value() for x in levels])
    out = []
    for lv, p_holm in zip(levels, adjusted, strict=True):
        level = bonferroni_level(alpha, m)
        lo, hi = lv.bounds(level)
        name = check_name(lv.spec, lv.mode, ALL)
        conf = f"{cfg.confidence:.0%}"
        what = (
            f"{name}: {lv.sample()}; change {lv.shown(lv.worse)} ({conf} bounds "
            f"{lv.shown(lo)} … {lv.shown(hi)}; {lv.spread_name()} "
            f"{lv.spread_shown(lv.spread)}, {lv.df} degrees "
            f"of freedom: {lv.width(level):.2f}× the width a known variance would give; "
            f"{sees(lv, level)})"
        )
        needed = lv.runs_needed(level)
        nums = {
            "metric": lv.spec.metric.name,
            "percentile": lv.spec.percentile,
            "mode": lv.mode,
            "scope": ALL,
            "method": "paired" if lv.paired else "run-level",
            "baseline_runs": lv.base,
            "run_runs": lv.run,
            "change_pct": _pct(lv, lv.worse),
            "ci_low_pct": min(_pct(lv, lo), _pct(lv, hi)),
            "ci_high_pct": max(_pct(lv, lo), _pct(lv, hi)),
            "spread_pct": _size(lv, lv.spread),
            "df": lv.df,
            "width_vs_known_variance": lv.width(level),
            "resolves_pct": _pct(lv, lv.fails_from(level)),
            "power_at_twice_allowed": lv.power(level),
            "history_runs_needed": needed[0],
            "run_repeats_needed": needed[1],
            **_split(lv, level),
            "p_value": lv.p_value(),
            "p_holm": p_holm,
            "family": m,
            "allowed": lv.spec.allowed,
            "confidence": cfg.confidence,
        }
        if lv.spec.metric.kind == LATENCY:  # what the starved-client doubt weighs (ms)
            nums["baseline_ms"] = math.exp(statistics.fmean(map(math.log, lv.base)))
            nums["run_ms"] = math.exp(statistics.fmean(map(math.log, lv.run)))
        allowed = f"allowed {lv.spec.allowed_text}"
        if p_holm <= alpha:
            out.append(Check(name, FAIL, f"{what}: worse beyond {allowed} across runs", nums))
        elif hi > lv.twice() and lo < 0:
            out.append(
                Check(
                    name,
                    INCONCLUSIVE,
                    f"{what}: the runs spread too widely to tell no change from twice the "
                    f"{allowed}; "
                    + (
                        "more --repeat pairs narrow it"
                        if lv.paired
                        else "more runs in the history (or --repeat) narrow it"
                    ),
                    nums,
                )
            )
        else:
            where = (
                f"beyond {allowed} but within the runs' noise (not significant)"
                if lv.worse > lv.allowed()
                else f"within {allowed} across runs"
            )
            out.append(Check(name, PASS, f"{what}: {where}", nums))
    return out


def sees(lv: RunLevel, level: float) -> str:
    """What this history can tell: ``fails from +14.2%, and +20.0% 97% of the time`` — and
    when that is short of ``DETECT_POWER``, how many runs would do, or that none would."""
    power = lv.power(level)
    text = (
        f"fails from {lv.shown(lv.fails_from(level))}, and {lv.shown(lv.twice())} "
        f"{power:.0%} of the time"
    )
    if power >= DETECT_POWER:
        return text
    history, repeats = lv.runs_needed(level)
    want = f"to fail {lv.shown(lv.twice())} {DETECT_POWER:.0%} of the time at this spread"
    if history is not None:
        return f"{text}; {want}: a history of {history} runs"
    if lv.paired:
        return f"{text}; {want}: {paired_ways(lv, level, repeats)}"
    if repeats is not None:
        return (
            f"{text}; {want}: no history alone; {repeats} runs of each build (--repeat "
            f"{repeats}, the history's builds too)"
        )
    return (
        f"{text}; {want}: not within {MOST_RUNS} runs — the spread between runs must come "
        "down (longer runs, a steadier load or machine)"
    )


def paired_ways(lv: RunLevel, level: float, pairs: int | None) -> str:
    """What would let a paired check see twice its allowance: more pairs, or these pairs
    with longer phases where their requests' sampling error is most of the spread."""
    ways = [f"{pairs} pairs (--repeat {pairs} with --baseline-target)"] if pairs else []
    if (longer := lv.longer_phases(level)) is not None:
        ways.append(f"these {len(lv.run)} pairs with phases {longer}× as long (--duration)")
    text = " or ".join(ways) or f"not within {MOST_RUNS} pairs"
    excess = lv.excess()
    if lv.sampling is None or excess is None:
        return text
    split = (
        f"of a pair's difference, {lv.spread_shown(lv.sampling)} is its phases' requests' "
        f"sampling error and {lv.spread_shown(excess)} strays beyond it between pairs"
    )
    if longer is None:
        return f"{text} — {split}: longer phases alone would not do"
    return f"{text} — {split}"


def _split(lv: RunLevel, level: float) -> dict[str, Any]:
    """A paired check's spread told apart, for gate.json (empty where it is not)."""
    excess = lv.excess()
    if lv.sampling is None or excess is None:
        return {}
    return {
        "sampling_pct": _size(lv, lv.sampling),
        "excess_pct": _size(lv, excess),
        "longer_phases_needed": lv.longer_phases(level),
    }


def _pct(lv: RunLevel, x: float) -> float:
    """A change on the check's scale as the metric's own, in % (a share: points)."""
    return lv.change(x) * 100


def _size(lv: RunLevel, x: float) -> float:
    """A spread on the check's scale in % (a share: points)."""
    return x * 100 if lv.is_share else math.expm1(x) * 100


def baseline_runs(doc: dict[str, Any], mode: str) -> list[BaselineSide]:
    """A baseline's run-level sides for ``mode``: each ``--repeat`` it stored, else itself."""
    got = [BaselineSide(r) for r in doc.get("repeats") or [] if isinstance(r, dict)]
    got = [s for s in got if mode in s.modes()]
    return got if len(got) > 1 else [BaselineSide(doc)]


def evaluate_runs(
    run: Run,
    bases: Sequence[dict[str, Any]],
    cfg: GateConfig,
    modes: Sequence[str],
) -> list[RunLevel] | None:
    """The run-level comparisons of every gated check; None when between-run variance
    cannot be estimated (one run on each side) or a check has no value."""
    levels = []
    for mode in modes:
        phases = repeat_phases(run.meta, mode)
        sides = [RecordsSide(run, [p]) for p in phases] if len(phases) > 1 else [RecordsSide(run)]
        stored = [s for d in bases for s in baseline_runs(d, mode)]
        for spec in cfg.specs():
            base_vals = [v for s in stored if (v := run_value(s, spec, mode)) is not None]
            run_vals = [v for s in sides if (v := run_value(s, spec, mode)) is not None]
            level = run_level(spec, mode, base_vals, run_vals)
            if level is None:
                return None
            levels.append(level)
    return levels


def judged(run: Run, levels: Sequence[RunLevel], cfg: GateConfig) -> list[Check]:
    """``decide``'s checks, each failure weighed against a starved load generator (a
    failure the client may have caused is inconclusive, as in the single-run gate)."""
    side = RecordsSide(run)
    return [
        unless_starved(c, run, side.group(lv.mode), lv.mode, lv.spec, cfg.starved_share)
        for c, lv in zip(decide(levels, cfg), levels, strict=True)
    ]


def interrupted(run: Run) -> Check | None:
    """A run that did not complete cannot speak for its build."""
    status = run.meta.get("status")
    if status in (None, "completed"):
        return None
    return Check(
        "run complete",
        INCONCLUSIVE,
        f"inconclusive: the run's status is {status} (run.json): an interrupted or failed run "
        "is not a sample of its build",
    )


def gate_history(
    run: Run, folder: Path, cfg: GateConfig, last: int = DEFAULT_LAST
) -> tuple[GateResult, History]:
    """``report gate RUN --history DIR``: the run against the last ``last`` comparable runs."""
    history = read(folder)
    bases, left = comparable(history, run.meta, cfg.allow_difference, last)
    notes: list[dict[str, Any]] = []
    if history.skipped:
        notes.append(
            _note(
                "history_skipped",
                f"skipped {len(history.skipped)} unreadable entries: {'; '.join(history.skipped)}",
            )
        )
    if left:
        notes.append(
            _note(
                "history_left_out",
                f"left out {len(left)} runs not comparable with this one: {'; '.join(left)}",
            )
        )
    name = f"history {folder} ({len(bases)} comparable runs of {len(history.entries)})"
    if not bases:
        check = Check(
            "history",
            INCONCLUSIVE,
            f"inconclusive: {folder} holds no run comparable with this one "
            f"({len(history.entries)} entries)",
        )
        return GateResult(cfg, [check], run.name, name, notes), history
    if paired_sides(run) is not None:  # an interrupted run is named by gate_paired
        result = gate_paired_history(run, bases, cfg, name)
        result.differences[:0] = notes
        return result, history
    side = RecordsSide(run)
    modes = gated_modes(side, BaselineSide(bases[-1]), cfg)
    levels = evaluate_runs(run, bases, cfg, modes)
    if levels is None:
        # one run each side: the bootstrap against the latest, saying what it cannot know
        result = evaluate(run, bases[-1], cfg)
        result.baseline_name = name
        steal = machine_note(run, bases)
        result.differences += [*notes, between_note(1, 1), *([steal] if steal else [])]
        return result, history
    if (steal := machine_note(run, bases)) is not None:
        notes.append(steal)
    checks = judged(run, levels, cfg)
    if (stopped := interrupted(run)) is not None:
        checks.insert(0, stopped)
    result = GateResult(cfg, checks, run.name, name, notes)
    return result, history


def machine_note(run: Run, bases: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The host CPU steal the run met beside what the baseline runs met, when any side met
    enough to matter (``STEAL_AMBER_PCT``): a tail that moved with it may be the machine's."""
    mine = run_steal(run.meta)
    theirs = [
        float(m["steal_pct"])
        for d in bases
        if isinstance(m := d.get("machine"), dict) and isinstance(m.get("steal_pct"), int | float)
    ]
    if mine is None or max([mine, *theirs]) < STEAL_AMBER_PCT:
        return None
    base = (
        f"the baseline runs' {min(theirs):.1f}–{max(theirs):.1f} % (mean "
        f"{statistics.fmean(theirs):.1f} %)"
        if theirs
        else "not recorded for the baseline runs"
    )
    return _note(
        "machine_steal",
        f"hypervisor CPU steal on the load generator's host: this run {mine:.1f} %, {base}; "
        "steal comes in bursts that slow whatever runs on the host, so a tail that moved "
        "with it may be the machine's, not the build's",
    )


def _note(key: str, text: str) -> dict[str, Any]:
    return {"key": key, "baseline": None, "run": None, "blocking": False, "text": text}


def gate_baseline(run: Run, baseline: dict[str, Any], cfg: GateConfig) -> GateResult:
    """``report gate RUN --baseline FILE``: the bootstrap verdict, and where the run has
    ``--repeat`` phases, the run-level one (its repeats give the between-run spread);
    with one run on each side, the verdict says the between-run variance is unknown."""
    result = evaluate(run, baseline, cfg)
    if (steal := machine_note(run, [baseline])) is not None:
        result.differences.append(steal)
    modes = gated_modes(RecordsSide(run), BaselineSide(baseline), cfg)
    levels = evaluate_runs(run, [baseline], cfg, modes)
    if levels is None:
        result.differences.append(between_note(1, 1))
        return result
    return _run_level_checks(result, run, levels, cfg)


def paired_levels(
    run: Run, cfg: GateConfig, bases: Sequence[dict[str, Any]] = ()
) -> list[RunLevel] | None:
    """A ``--baseline-target`` run's checks on its pairs of repeats (``stream-2`` with
    ``baseline-stream-2``), the spread pooled with the pairs of the earlier paired runs
    in ``bases`` (history entries with ``twins``); None without a baseline target, or
    where a check has no degree of freedom or no value."""
    sides = paired_sides(run)
    if sides is None:
        return None
    levels = []
    for mode in gated_modes(*sides, cfg):
        phases = repeat_phases(run.meta, mode)
        for spec in cfg.specs():
            level = _paired_check(run, bases, spec, mode, phases)
            if level is None:
                return None
            levels.append(level)
    return levels


def _paired_check(
    run: Run,
    bases: Sequence[dict[str, Any]],
    spec: MetricSpec,
    mode: str,
    phases: Sequence[str],
) -> RunLevel | None:
    pairs, errors = [], []
    for p in phases:
        own, twin = RecordsSide(run, [p]), RecordsSide(run, [BASELINE_PREFIX + p])
        r, b = run_value(own, spec, mode), run_value(twin, spec, mode)
        if r is None or b is None:
            continue
        pairs.append((b, r))
        e_own, e_twin = sampling_error(own, spec, mode), sampling_error(twin, spec, mode)
        if e_own is not None and e_twin is not None:
            errors.append(e_own**2 + e_twin**2)
    earlier = [d for doc in bases if (d := pair_differences(doc, spec, mode))]
    told = errors if len(errors) == len(pairs) else None
    return paired_level(spec, mode, [b for b, _ in pairs], [r for _, r in pairs], earlier, told)


def pair_differences(doc: dict[str, Any], spec: MetricSpec, mode: str) -> list[float]:
    """A paired run's history entry: each pair's difference (its ``repeats`` against its
    ``twins``) on the check's scale; empty where it has no pairs or a pair no value."""
    reps, twins = doc.get("repeats") or [], doc.get("twins") or []
    if len(reps) != len(twins):
        return []
    base, run = [], []
    for r, t in zip(reps, twins, strict=True):
        if not isinstance(r, dict) or not isinstance(t, dict):
            return []
        rv = run_value(BaselineSide(r), spec, mode)
        bv = run_value(BaselineSide(t), spec, mode)
        if rv is None or bv is None:
            return []
        run.append(rv)
        base.append(bv)
    d = differences(spec, base, run)
    return [] if d is None else d.tolist()


def gate_paired_history(
    run: Run, bases: Sequence[dict[str, Any]], cfg: GateConfig, name: str
) -> GateResult:
    """``report gate RUN --history DIR`` of a ``--baseline-target`` run: its own pairs'
    mean difference, the spread pooled with the history's paired runs (those without
    twins are left out, counted)."""
    paired = [d for d in bases if d.get("twins")]
    result = gate_paired(run, cfg, paired)
    result.baseline_name = f"{name}; {len(paired)} paired"
    if len(paired) < len(bases):
        result.differences.append(
            _note(
                "history_unpaired",
                f"left out {len(bases) - len(paired)} history runs made without "
                "--baseline-target --repeat (no pairs to pool the spread from)",
            )
        )
    return result


def gate_paired(run: Run, cfg: GateConfig, bases: Sequence[dict[str, Any]] = ()) -> GateResult:
    """``report gate RUN`` of a ``--baseline-target`` run: the bootstrap over the pooled
    phases, and with ``--repeat`` 2 or more (or earlier paired runs, ``bases``), the
    paired run-level checks in its place (the pairs' differences carry the between-run
    variance the pooled sampling misses)."""
    result = evaluate_paired(run, cfg)
    levels = paired_levels(run, cfg, bases)
    if levels is None:
        result.differences.append(between_note(1, 1))
        if (stopped := interrupted(run)) is not None:
            result.checks.insert(0, stopped)
        return result
    return _run_level_checks(result, run, levels, cfg)


def _scenario_aside(c: Check) -> Check:
    """A scenario's bootstrap check beside run-level ones: shown, not a verdict.  It pools
    the repeats' requests and cannot see how one run strays from the next (one A/A job
    of a real vLLM failed on one scenario's +29 % while its pairs spread 38 %)."""
    if c.verdict not in (FAIL, INCONCLUSIVE, PASS):
        return c
    return Check(
        c.name,
        SKIPPED,
        f"{c.reason} — set aside: a scenario's check pools the runs' requests and cannot "
        "see the spread between runs; the mode is judged across runs above",
        c.numbers,
    )


def _run_level_checks(
    result: GateResult, run: Run, levels: Sequence[RunLevel], cfg: GateConfig
) -> GateResult:
    """The run-level checks in place of the bootstrap's whole-run checks they decide;
    the bootstrap's others (per scenario, limits, completeness) stay."""
    if any(d.get("blocking") for d in result.differences):
        return result  # not comparable: that verdict stands
    replaced = {(lv.spec.metric.name, lv.mode) for lv in levels}
    others = [  # what the run-level checks do not decide: limits, completeness
        _scenario_aside(c) if c.numbers.get("scope") not in (None, ALL) else c
        for c in result.checks
        if not (
            c.numbers.get("scope") == ALL
            and (c.numbers.get("metric"), c.numbers.get("mode")) in replaced
        )
    ]
    result.checks = [*judged(run, levels, cfg), *others]
    if (stopped := interrupted(run)) is not None:
        result.checks.insert(0, stopped)
    return result
