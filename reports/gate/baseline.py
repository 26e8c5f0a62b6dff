"""Baselines: what the gate needs of a run (per mode and scenario, per metric), as JSON.

Per mode (``metrics``) and, when a mode has several scenarios, per scenario
(``by_scenario``): every latency metric's values (ms; a quantile sketch of
``MAX_VALUES`` points when there are more) and, for ITL (a request's gaps, grouped),
``design_effect`` at ``bootstrap.EFFECT_PERCENTILES``: what the gate counts them
as.  ``rates``: throughput and goodput, per second of the measured phases.
``outcomes``: requests and failures per scope (the error rate).  ``goodput_slo``:
the SLO goodput was counted with (the gate counts the run's with the same).
``repeats``: with ``--repeat N``, each repeat's ``metrics``, ``rates`` and ``outcomes`` on
its own (the run-level values the gate reads; ``reports.gate.history``); ``twins``: with
``--baseline-target`` too, each repeat's twin on the baseline target, in the same order
(a ``--baseline-target`` run's baseline is otherwise its own target's alone).
``machine``: the host CPU steal the run met (``steal_pct``, mean % of the measured
phases; ``reports.table.trust.run_steal``), which the history gate sets beside the run's.
``fingerprint``: what shapes the numbers (``reports.gate.fingerprint``), compared with
the run's before anything else.  A schema-1 file (pooled values only) still gates
what it holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmload.loadtests.redact import redact_value
from llmload.loadtests.run.phases import BASELINE_PREFIX
from llmload.loadtests.slo import format_slo
from llmload.reports.capacity.curve import capacity_doc
from llmload.reports.gate.bootstrap import design_effects
from llmload.reports.gate.fingerprint import fingerprint
from llmload.reports.gate.metrics import LATENCY_METRICS, RATE_METRICS
from llmload.reports.gate.sides import ALL, RecordsSide, paired_sides, repeat_phases
from llmload.reports.server.versus import mode_means
from llmload.reports.table.arraystats import percentile_sorted
from llmload.reports.table.loader import Run
from llmload.reports.table.trust import run_steal

SCHEMA = 2
KIND = "llmload-baseline"
#: a group with more values than this is stored as that many evenly spaced quantiles
MAX_VALUES = 4000


class BaselineError(Exception):
    """The baseline file is missing, unreadable or not a baseline."""


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


def _groups(side: RecordsSide) -> dict[str, Any]:
    """Per mode and scope: every latency metric's values, rate series, requests and failures."""
    metrics: dict[str, dict[str, Any]] = {}
    by_scenario: dict[str, dict[str, dict[str, Any]]] = {}
    rates: dict[str, dict[str, dict[str, list[float]]]] = {}
    counts: dict[str, dict[str, Any]] = {}
    for mode in sorted(side.modes()):
        names = side.scenarios(mode)
        scopes = [ALL, *names] if len(names) > 1 else [ALL]
        groups: dict[str, dict[str, int]] = {}
        for scope in scopes:
            for metric in LATENCY_METRICS:
                got = side.latency(metric, mode, scope)
                if got is None:
                    continue
                # grouped values (ITL): how much their grouping widens a percentile, read
                # before ``compact`` sorts them in place
                effects = design_effects(got.values, got.groups) if got.groups is not None else {}
                entry = compact(got.values, inplace=True)
                if effects:
                    entry["design_effect"] = {k: round(v, 3) for k, v in effects.items()}
                if scope == ALL:
                    metrics.setdefault(metric, {})[mode] = entry
                else:
                    by_scenario.setdefault(metric, {}).setdefault(mode, {})[scope] = entry
            for metric in RATE_METRICS:
                series = side.rates(metric, mode, scope)
                if series:
                    rates.setdefault(metric, {}).setdefault(mode, {})[scope] = [
                        round(x, 3) for x in series
                    ]
            n_failed = side.outcomes(mode, scope)
            if n_failed is not None:
                groups[scope] = {"n": n_failed[0], "failed": n_failed[1]}
        counts[mode] = {"scenarios": names, "groups": groups}
    return {"metrics": metrics, "by_scenario": by_scenario, "rates": rates, "outcomes": counts}


def _repeats(run: Run, prefix: str = "") -> list[dict[str, Any]]:
    """Each ``--repeat`` phase's groups on its own (a mode with one phase has none): the
    run-level values a gate reads of this baseline (``reports.gate.history``).  ``prefix``
    ``baseline-``: the baseline target's twin of each (``--baseline-target``)."""
    out = []
    for mode in sorted({str(p.get("mode")) for p in run.meta.get("phases") or []}):
        phases = repeat_phases(run.meta, mode)
        if len(phases) > 1:
            out += [{"phase": p, **_groups(RecordsSide(run, [prefix + p]))} for p in phases]
    return out


def make_baseline(run: Run) -> dict[str, Any]:
    """The baseline document for ``run`` (warm-up excluded).  A ``--baseline-target`` run's
    is its own target's (the twins' phases are not pooled in); with ``--repeat`` its
    ``twins`` are each repeat's twin on the baseline target, in the order of ``repeats``:
    the pairs a history of paired runs pools its spread from."""
    paired = paired_sides(run)
    side = RecordsSide(run) if paired is None else paired[0]
    measured = side.records
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
                "server",
                "calibration",
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
        "fingerprint": fingerprint(run.meta),
        **_groups(side),
        **({"repeats": reps} if (reps := _repeats(run)) else {}),
        **({"twins": _repeats(run, BASELINE_PREFIX)} if paired is not None and reps else {}),
        "goodput_slo": format_slo(side.slo),
        **({"capacity": cap} if (cap := capacity_doc(run)) is not None else {}),
        **({"server": server} if (server := mode_means(run)) else {}),
        **({"machine": {"steal_pct": st}} if (st := run_steal(run.meta)) is not None else {}),
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
