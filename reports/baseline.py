"""Baselines: what the gate needs of a run's distribution (per mode, per metric), as JSON."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.redact import redact_value
from llmload.reports.arraystats import percentile_sorted
from llmload.reports.capacity.curve import capacity_doc
from llmload.reports.columns import RecordTable
from llmload.reports.loader import Run

SCHEMA = 1
KIND = "llmload-baseline"
#: a group with more values than this is stored as that many evenly spaced quantiles
MAX_VALUES = 4000
GATED_METRICS = ("ttft", "e2e", "tpot", "itl", "ttft_from_intended", "e2e_from_intended")
#: open-loop metrics: latency counted from the intended send time (``+ schedule_delay_s``)
FROM_INTENDED = {"ttft_from_intended": "ttft_s", "e2e_from_intended": "e2e_s"}


class BaselineError(Exception):
    """The baseline file is missing, unreadable or not a baseline."""


def metric_values(records: Sequence[RequestRecord], metric: str) -> np.ndarray:
    """Milliseconds of ``metric`` over the successful records (ITL: every gap, pooled).

    ``*_from_intended`` adds each record's schedule delay and skips records without one
    (closed-loop requests have no intended send time).  Read from the records' columns
    (``reports.columns``): an array, in record order.
    """
    t = RecordTable.of(records)
    ok = t.ok()
    if metric == "itl":
        return t.itl(ok) * 1000  # type: ignore[no-any-return]
    if metric in FROM_INTENDED:
        v, d = t.num(FROM_INTENDED[metric])[ok], t.num("schedule_delay_s")[ok]
        keep = np.isfinite(v) & ~np.isnan(d)
        return (v[keep] + d[keep]) * 1000  # type: ignore[no-any-return]
    v = t.num({"ttft": "ttft_s", "e2e": "e2e_s", "tpot": "tpot_s"}[metric])[ok]
    return v[np.isfinite(v)] * 1000  # type: ignore[no-any-return]


def compact(values: Sequence[float] | np.ndarray, inplace: bool = False) -> dict[str, Any]:
    """Sorted values rounded to 10 µs, or a quantile sketch of ``MAX_VALUES`` points when larger.

    ``inplace``: ``values`` is an array of the caller's own, sorted where it is (a run's
    gaps are tens of millions: no second copy)."""
    if inplace and isinstance(values, np.ndarray) and values.dtype == np.float64:
        xs = values
        xs.sort()
    else:
        xs = np.sort(np.asarray(values, dtype=float))
    n = len(xs)
    if n > MAX_VALUES:
        kept = [percentile_sorted(xs, 100.0 * (i + 0.5) / MAX_VALUES) for i in range(MAX_VALUES)]
    else:
        kept = xs.tolist()
    return {"n": n, "sketch": n > MAX_VALUES, "values_ms": [round(x, 2) for x in kept]}


def make_baseline(run: Run) -> dict[str, Any]:
    """The baseline document for ``run`` (warm-up excluded)."""
    measured = run.measured
    metrics: dict[str, dict[str, Any]] = {}
    for metric in GATED_METRICS:
        for mode in sorted(measured.distinct("mode")):
            vals = metric_values(measured.where(measured.is_("mode", mode)), metric)
            if len(vals):
                metrics.setdefault(metric, {})[mode] = compact(vals, inplace=True)
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
        **({"capacity": cap} if (cap := capacity_doc(run)) is not None else {}),
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
