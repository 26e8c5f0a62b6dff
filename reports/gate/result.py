"""The gate's settings, its checks and its verdict (the values every gate module shares)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from llmload.loadtests.run.healthlog import STARVED_SHARE
from llmload.reports.gate.metrics import LATENCY, RATE, MetricSpec, parse_metrics

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
#: a detail check (one scenario) that could not be judged on its own: shown, not counted
SKIPPED = "skipped"
EXIT = {PASS: 0, FAIL: 1, INCONCLUSIVE: 2}
#: ``--inconclusive``: the exit code an inconclusive verdict gets (neutral: its own, 2)
INCONCLUSIVE_EXIT = {"neutral": EXIT[INCONCLUSIVE], "pass": EXIT[PASS], "fail": EXIT[FAIL]}
DEFAULT_SEED = 20240607
DEFAULT_RESAMPLES = 2000
#: a rate is compared over at least this many whole seconds on each side
MIN_SECONDS = 5
#: the error rate is compared over at least this many requests on each side
MIN_REQUESTS = 30


@dataclass
class GateConfig:
    """What to gate and how strictly."""

    #: ``--metric``: ``ttft``, a list ``ttft:p95:10%,itl,throughput:5%``, or ``capacity``
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
    #: fingerprint keys whose difference the user accepts (``--allow-difference``)
    allow_difference: list[str] = field(default_factory=list)
    #: count grouped values (a request's gaps) by their design effect; False: as independent,
    #: the gate before it did (``python -m bench gate-grouped`` measures both; no CLI option)
    grouped: bool = True

    def specs(self) -> list[MetricSpec]:
        """The gated metrics, each with its percentile and allowance (``ValueError`` if bad)."""
        return parse_metrics(self.metric, self.percentile, self.max_regression, self.from_intended)

    def needed(self, spec: MetricSpec | None = None) -> int:
        """Minimum samples per side: at least 3 expected beyond the percentile, and 30;
        a rate: ``MIN_SECONDS`` seconds; the error rate: ``MIN_REQUESTS`` requests."""
        if spec is not None and spec.metric.kind == RATE:
            return MIN_SECONDS
        if spec is not None and spec.metric.kind != LATENCY:
            return MIN_REQUESTS
        if self.min_samples is not None:
            return self.min_samples
        q = spec.percentile if spec is not None and spec.percentile else self.percentile
        tail = max(1.0 - q / 100.0, 1e-6)
        return max(30, math.ceil(3.0 / tail - 1e-9))


@dataclass
class Check:
    """One decision (a metric of a mode and scope, or an absolute limit) with its numbers."""

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
    #: what differs between the run and the baseline (``reports.gate.fingerprint.Difference`` dicts)
    differences: list[dict[str, Any]] = field(default_factory=list)
    #: the between-run spread of repeated phases (``reports.gate.spread.spread``), when any
    spread: list[dict[str, Any]] = field(default_factory=list)
    #: the server's side beside the client's (``reports.server.versus.gate_lines``)
    server: list[str] = field(default_factory=list)

    @property
    def counted(self) -> list[Check]:
        """The checks that make the verdict (skipped details are shown, not counted)."""
        return [c for c in self.checks if c.verdict != SKIPPED]

    @property
    def verdict(self) -> str:
        verdicts = {c.verdict for c in self.counted}
        if FAIL in verdicts:
            return FAIL
        if INCONCLUSIVE in verdicts or not self.counted:
            return INCONCLUSIVE
        return PASS

    @property
    def exit_code(self) -> int:
        """0 pass, 1 fail; inconclusive 2 unless ``config.inconclusive`` maps it to 0 or 1."""
        if self.verdict == INCONCLUSIVE:
            return INCONCLUSIVE_EXIT[self.config.inconclusive]
        return EXIT[self.verdict]


def between_note(base_runs: int, run_runs: int) -> dict[str, Any]:
    """The note a verdict carries when the between-run variance could not be estimated."""
    return {
        "key": "between_run_variance",
        "baseline": base_runs,
        "run": run_runs,
        "blocking": False,
        "text": (
            f"between-run variance unknown ({base_runs} baseline run, {run_runs} run): the "
            "confidence covers the sampling inside these runs only, not how the next run "
            "of an unchanged build differs; keep a history (`llmload report baseline RUN "
            "--history DIR`, then `report gate RUN --history DIR`) or run --repeat 3"
        ),
    }
