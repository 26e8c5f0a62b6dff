"""A request's gaps are not independent: the ITL check counts them as what they are worth.

``design_effect`` (Kish's, of the share beyond the percentile) says how much wider a
percentile's sampling distribution is for grouped values; ``compare`` bootstraps each side
with ``n / design effect`` values.  Checked against values whose grouping is known, and by
simulated A/A pairs whose requests each have their own speed (the way a request co-batched
with a long prefill has several slow gaps): pooled as if independent, the interval is too
narrow and false alarms pass their nominal 5 %; counted by design effect they do not.
"""

from __future__ import annotations

import numpy as np
import pytest

from llmload.reports.gate import bootstrap
from llmload.reports.gate.bootstrap import (
    Side,
    compare,
    design_effect,
    design_effects,
    effect_at,
    effective_n,
)
from llmload.reports.gate.metrics import parse_metrics

#: ITL p95, no regression allowed: an A/A pair fails at the test's nominal 5 % exactly when
#: the run's bootstrap puts 95 % of its changes above none
STRICT_ITL = parse_metrics("itl", 95.0, 0.0, False)[0]


def grouped(
    rng: np.random.Generator, requests: int = 300, level_sigma: float = 0.3
) -> tuple[np.ndarray, np.ndarray]:
    """Gaps of ``requests`` requests (20–59 gaps each), ms: a speed of its own per request
    (log-normal, ``level_sigma``) times independent noise per gap."""
    sizes = rng.integers(20, 60, size=requests)
    level = np.repeat(rng.lognormal(0.0, level_sigma, requests), sizes)
    return 10.0 * level * rng.lognormal(0.0, 0.3, int(sizes.sum())), sizes


def test_independent_values_have_no_design_effect() -> None:
    rng = np.random.default_rng(3)
    values, sizes = grouped(rng, 2000, level_sigma=0.0)
    assert 1.0 <= design_effect(values, sizes, 95.0) < 1.2  # type: ignore[operator]  # a checker returned by a factory the stubs leave open


def test_identical_values_within_a_group_count_once() -> None:
    # every gap of a request the same: a request is worth one value, the design effect is
    # the group size
    rng = np.random.default_rng(4)
    m = 25
    values = np.repeat(rng.lognormal(0.0, 0.5, 4000), m)
    sizes = np.full(4000, m)
    assert design_effect(values, sizes, 95.0) == pytest.approx(m, rel=0.1)
    assert effective_n(values.size, m) == 4000


def test_alternating_gaps_never_narrow_the_interval() -> None:
    # jitter on token *times* makes a long gap follow a short one: negatively correlated
    # within a request; the interval is kept at the independent one's width, not narrowed
    rng = np.random.default_rng(5)
    times = np.arange(41) * 10.0 + rng.uniform(-8, 8, size=(500, 41))
    values = np.diff(times, axis=1).ravel()
    assert design_effect(values, np.full(500, 40), 95.0) == 1.0


def test_groups_that_do_not_add_up_are_unknown() -> None:
    values = np.arange(100, dtype=float)
    assert design_effect(values, np.array([50, 49]), 95.0) is None
    assert design_effect(values, np.array([100]), 95.0) is None  # one group: nothing to tell
    assert design_effects(values, np.array([0, 100, 0])) == {}


def test_a_stored_effect_is_read_at_its_percentile_or_the_larger_neighbour() -> None:
    effects = {"90": 2.0, "95": 3.0, "99": 5.0}
    assert effect_at(effects, 95.0) == 3.0
    assert effect_at(effects, 97.5) == 5.0
    assert effect_at(effects, 92.0) == 3.0
    assert effect_at(effects, 99.9) == 5.0
    assert effect_at({}, 95.0) is None


def test_a_baseline_without_effects_is_taken_to_be_like_the_run() -> None:
    rng = np.random.default_rng(6)
    a, ga = grouped(rng)
    b, gb = grouped(rng)
    own = design_effect(b, gb, 95.0)
    c = compare(STRICT_ITL, "stream", "all", Side.of(a), Side.of(b, groups=gb), 400, 1)
    assert c.base_effect == c.run_effect == own and own is not None and own > 3
    stored = design_effects(a, ga)
    c = compare(STRICT_ITL, "stream", "all", Side.of(a, effects=stored), Side.of(b), 400, 1)
    assert c.base_effect == c.run_effect == stored["95"]


def test_a_stored_effect_widens_the_interval_as_the_groups_do() -> None:
    rng = np.random.default_rng(7)
    a, ga = grouped(rng)
    b, gb = grouped(rng)
    stored = design_effects(a, ga)  # as `report baseline` keeps them, before it sorts

    def run_side() -> Side:  # (``compare`` sorts a side's values in place)
        return Side.of(b.copy(), groups=gb)

    by_groups = compare(
        STRICT_ITL, "stream", "all", Side.of(a.copy(), groups=ga), run_side(), 800, 2
    )
    by_file = compare(
        STRICT_ITL, "stream", "all", Side.of(np.sort(a), effects=stored), run_side(), 800, 2
    )
    pooled = compare(STRICT_ITL, "stream", "all", Side.of(a.copy()), Side.of(b.copy()), 800, 2)
    width = {k: float(np.ptp(np.quantile(c.boots, [0.05, 0.95]))) for k, c in
             (("groups", by_groups), ("file", by_file), ("pooled", pooled))}  # fmt: skip
    assert width["file"] == pytest.approx(width["groups"], rel=0.05)
    assert width["groups"] > 1.8 * width["pooled"]


def false_alarms(level_sigma: float, trials: int, use_groups: bool) -> float:
    """The share of simulated A/A pairs (independent draws, same distribution) whose ITL p95
    check fails at 95 % with no regression allowed."""
    rng = np.random.default_rng(11)
    fails = 0
    for t in range(trials):
        a, ga = grouped(rng, level_sigma=level_sigma)
        b, gb = grouped(rng, level_sigma=level_sigma)
        if use_groups:
            base, run = Side.of(a, groups=ga), Side.of(b, groups=gb)
        else:
            base, run = Side.of(a), Side.of(b)
        fails += compare(STRICT_ITL, "stream", "all", base, run, 400, t).p_value() <= 0.05
    return fails / trials


def test_grouped_gaps_keep_the_false_alarm_rate_nominal() -> None:
    # requests with speeds of their own: pooled as independent, about 30 % of A/A pairs would
    # fail at a nominal 5 %; counted by design effect, 5.6 % (3,000 trials: 5.5 % at sigma 0.2)
    trials = 600
    assert false_alarms(0.3, trials, use_groups=False) > 0.15
    assert false_alarms(0.3, trials, use_groups=True) < 0.09
    # and where gaps are independent, the correction changes nothing that matters
    assert false_alarms(0.0, trials, use_groups=True) < 0.09


def test_counting_a_run_of_groups_at_a_time_counts_every_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # chunks far smaller than the data, groups longer than a chunk, empty groups skipped
    monkeypatch.setattr(bootstrap, "CHUNK_VALUES", 50)
    rng = np.random.default_rng(8)
    sizes = rng.integers(1, 120, size=400)
    values = rng.random(int(sizes.sum()))
    starts = np.cumsum(sizes) - sizes
    want = np.add.reduceat(values > 0.9, starts, dtype=np.int64)
    assert (bootstrap._beyond_per_group(values, starts, sizes, 0.9) == want).all()
