"""llmload.speedcheck: the planned load against the bundled engine's measured speed."""

from __future__ import annotations

import pytest

from llmload import speedcheck
from llmload.loadtests.options import RunOptions


def test_the_mix_plan_asks_users_over_pacing_times_the_mean_max_tokens() -> None:
    opts = RunOptions.of(users=20, pacing=3.0, scenario="mix")
    # mix = short_qa 64 x 5, code_gen 256 x 3, long_summary 128 x 2 (weights 5:3:2)
    assert speedcheck.mean_max_tokens(opts) == pytest.approx((64 * 5 + 256 * 3 + 128 * 2) / 10)
    assert speedcheck.planned_tokens_per_s(opts) == pytest.approx(20 / 3 * 134.4)
    assert speedcheck.planned_tokens_per_s(RunOptions.of(rate=2.0, max_tokens=50)) == 100.0
    assert speedcheck.planned_tokens_per_s(RunOptions.of(pacing=0.0)) is None  # back-to-back


def test_verdict_warns_only_when_the_plan_exceeds_the_speed() -> None:
    opts = RunOptions.of(users=20, pacing=3.0, scenario="short_qa")  # 20/3 x 64 = 427 tokens/s
    info, lines = speedcheck.verdict(opts, 2000.0, 20)
    assert info["planned_share"] == pytest.approx(0.213, abs=0.001)
    assert "21% of that speed" in lines[1] and len(lines) == 2
    info, lines = speedcheck.verdict(opts, 600.0, 20)
    assert lines[-1].startswith("note: over half")
    info, lines = speedcheck.verdict(opts, 350.0, 20)
    assert info["planned_share"] > 1 and lines[-1].startswith("warning: the planned load exceeds")
    info, lines = speedcheck.verdict(RunOptions.of(pacing=0.0), 350.0, 20)
    assert "planned_share" not in info and "back-to-back" in lines[-1]
