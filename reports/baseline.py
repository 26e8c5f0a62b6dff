"""Baselines: what the gate needs of a run's distribution (per mode, per metric), as JSON."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.redact import redact_value
from llmload.reports.capacity.curve import capacity_doc
from llmload.reports.loader import Run
from llmload.reports.server.compare import mode_means
from llmload.reports.stats import percentile

SCHEMA = 1
KIND = "llmload-baseline"
#: a group with more values than this is stored as that many evenly spaced quantiles
MAX_VALUES = 4000
GATED_METRICS = ("ttft", "e2e", "tpot", "itl", "ttft_from_intended", "e2e_from_intended", "ttfo")
#: open-loop metrics: latency counted from the intended send time (``+ schedule_delay_s``)
FROM_INTENDED = {"ttft_from_intended": "ttft_s", "e2e_from_intended": "e2e_s"}


class BaselineError(Exception):
    """The baseline file is missing, unreadable or not a baseline."""


def metric_values(records: list[RequestRecord], metric: str) -> list[float]:
    """Milliseconds of ``metric`` over the successful records (ITL: every gap, pooled).

    ``*_from_intended`` adds each record's schedule delay and skips records without one
    (closed-loop requests have no intended send time).
    """
    ok = [r for r in records if r.ok]
    if metric == "itl":
        return [g * 1000 for r in ok for g in r.itl_s]
    if metric in FROM_INTENDED:
        late = ((getattr(r, FROM_INTENDED[metric]), r.schedule_delay_s) for r in ok)
        return [
            (v + d) * 1000 for v, d in late if v is not None and d is not None and math.isfinite(v)
        ]
    attr = {"ttft": "ttft_s", "e2e": "e2e_s", "tpot": "tpot_s", "ttfo": "ttfo_s"}[metric]
    vals = (getattr(r, attr) for r in ok)
    return [v * 1000 for v in vals if v is not None and math.isfinite(v)]


def compact(values: list[float]) -> dict[str, Any]:
    """Sorted values rounded to 10 µs, or a quantile sketch of ``MAX_VALUES`` points when larger."""
    xs = sorted(values)
    n = len(xs)
    if n > MAX_VALUES:
        xs = [percentile(xs, 100.0 * (i + 0.5) / MAX_VALUES) for i in range(MAX_VALUES)]
    return {"n": n, "sketch": n > MAX_VALUES, "values_ms": [round(x, 2) for x in xs]}


def gated_values(records: list[RequestRecord]) -> dict[str, dict[str, Any]]:
    """``{metric: {mode: compact values}}`` of ``records`` (what the gate compares)."""
    metrics: dict[str, dict[str, Any]] = {}
    for metric in GATED_METRICS:
        for mode in sorted({r.mode for r in records}):
            vals = metric_values([r for r in records if r.mode == mode], metric)
            if vals:
                metrics.setdefault(metric, {})[mode] = compact(vals)
    return metrics


def make_baseline(run: Run) -> dict[str, Any]:
    """The baseline document for ``run`` (warm-up excluded); each scenario's values too, for
    ``gate --scenario`` (a trace, prefix or agent workload is its own scenario)."""
    measured = run.measured
    metrics = gated_values(measured)
    scenarios = {
        name: gated_values([r for r in measured if r.scenario == name])
        for name in sorted({r.scenario for r in measured})
    }
    meta = redact_value(
        {
            k: run.meta.get(k)
            for k in (
                "target",
                "model",
                "protocol",
                "label",
                "config",
                "workload",
                "versions",
                "host",
            )
        }
    )
    return {
        "schema": SCHEMA,
        "kind": KIND,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source_run": run.name,
        "records": len(measured),
        "run": meta,
        "metrics": metrics,
        "scenarios": scenarios,
        **({"capacity": cap} if (cap := capacity_doc(run)) is not None else {}),
        **({"server": server} if (server := mode_means(run)) else {}),
    }


def write_baseline(run: Run, out: Path) -> dict[str, Any]:
    """Write the baseline of ``run`` to ``out`` and return it."""
    doc = make_baseline(run)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
    return doc


def read_baseline(path: Path) -> dict[str, Any]:
    """Load and check a baseline file; ``BaselineError`` says what is wrong."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise BaselineError(f"baseline {path} does not exist") from exc
    except (OSError, ValueError) as exc:
        raise BaselineError(f"baseline {path} is unreadable: {exc}") from exc
    if (
        not isinstance(doc, dict)
        or doc.get("kind") != KIND
        or not isinstance(doc.get("metrics"), dict)
    ):
        raise BaselineError(
            f"{path} is not an llmload baseline (make one with `llmload report baseline`)"
        )
    return doc
