"""A phase's results as vLLM ``bench serve --save-result`` writes them, beside ``summary.json``.

``vllm_result(records, duration_s, ...)`` is pure: the records of one measured
phase in, a dict with vLLM's field names out (``completed``, ``failed``,
``total_input_tokens``, ``request_throughput``, ``output_throughput``,
``mean_ttft_ms``, ``median_ttft_ms``, ``std_ttft_ms``, ``p99_ttft_ms``, ... for
``ttft``, ``tpot``, ``itl`` and ``e2el``), so the numbers drop into spreadsheets
built for ``vllm bench serve``.  ``build_run`` writes one ``vllm_bench_<phase>.json``
per measured phase.  Definitions follow vLLM's ``calculate_metrics`` where ours
differ (docs/reports.md lists each difference):

* only successful requests count (``completed``); tokens of failed ones are 0;
* ``tpot`` is vLLM's ``(e2e - ttft) / (output_tokens - 1)`` (ours in summary.json
  ends at the last content event, without the stream's tail);
* ``std`` is the population standard deviation and percentiles are numpy's
  linear interpolation (the same as ``reports.table.stats``);
* ``max_output_tokens_per_s`` counts content events per wall-clock second, as vLLM
  counts chunks; ``max_concurrent_requests`` is the peak of overlapping successful
  requests.

An empty distribution is ``null`` where vLLM writes 0.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.table.arraystats import finite_scaled_sorted, mean_and_std, percentile_sorted
from llmload.reports.table.columns import RecordTable
from llmload.reports.table.schema import Summary

#: vLLM's default ``--metric-percentiles`` is 99; the others are there for free
PERCENTILES = (50, 90, 95, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")
MS = 1000.0


def _stats(name: str, values: np.ndarray, out: dict[str, Any], inplace: bool = False) -> None:
    xs = finite_scaled_sorted(values, MS, inplace)
    if not len(xs):
        out.update({f"mean_{name}_ms": None, f"median_{name}_ms": None, f"std_{name}_ms": None})
        out.update({f"p{p}_{name}_ms": None for p in PERCENTILES})
        return
    mean, std = mean_and_std(xs)
    out[f"mean_{name}_ms"] = mean
    out[f"median_{name}_ms"] = percentile_sorted(xs, 50)
    out[f"std_{name}_ms"] = std
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = percentile_sorted(xs, p)


#: records per pass of ``_busiest_second`` (bounds the memory of one pass)
_CHUNK = 16384


def _peaks(ok: RecordTable) -> tuple[float, int]:
    """(content events in the busiest wall-clock second, most requests in flight at once)."""
    if not len(ok):
        return 0.0, 0
    start = ok.num("started_at")
    end = start + np.nan_to_num(ok.num("e2e_s"), nan=0.0)
    times = np.concatenate((start, end))
    deltas = np.concatenate((np.ones(len(start), np.int64), -np.ones(len(end), np.int64)))
    order = np.lexsort((deltas, times))  # an end before a start at the same instant
    peak = int(max(np.cumsum(deltas[order]).max(), 0))
    return _busiest_second(ok, float(start.min())), peak


def _busiest_second(ok: RecordTable, t0: float) -> float:
    """Content events per wall-clock second since ``t0``, at its most: each record's first
    at ``started_at + ttft``, each later one a gap after the one before (``arrivals``: the
    same running sums as adding one gap at a time)."""
    counts: dict[int, int] = {}
    timed = ok.where(~np.isnan(ok.num("ttft_s")))
    for lo in range(0, len(timed), _CHUNK):
        part = timed[lo : lo + _CHUNK]
        at = part.arrivals(part.num("started_at") + part.num("ttft_s"))
        seconds = (at - t0).astype(np.int64)  # int(): toward zero
        first = int(seconds.min())
        for k, c in enumerate(np.bincount(seconds - first).tolist()):
            if c:
                counts[first + k] = counts.get(first + k, 0) + c
    return float(max(counts.values(), default=0))


def vllm_result(
    records: Sequence[RequestRecord],
    duration_s: float,
    *,
    good: int | None = None,
    info: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One phase as vLLM ``bench serve``'s result JSON (pure).

    ``good`` is the number of requests that met the run's SLOs (goodput);
    ``info`` the setup fields vLLM puts first (``model_id``, ``request_rate``, ...).
    """
    t = RecordTable.of(records)
    ok = t.where(t.ok())
    total_in = int(np.nansum(ok.num("prompt_tokens")))
    total_out = int(np.nansum(ok.num("output_tokens")))
    dur = max(duration_s, 1e-9)
    peak_tokens, peak_inflight = _peaks(ok)
    out: dict[str, Any] = {
        "date": time.strftime("%Y%m%d-%H%M%S"),
        "backend": "llmload",
        **(info or {}),
        "duration": duration_s,
        "completed": len(ok),
        "failed": len(t) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / dur,
        "request_goodput": None if good is None else good / dur,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_inflight,
    }
    ttft, e2e, n = ok.num("ttft_s"), ok.num("e2e_s"), np.nan_to_num(ok.num("output_tokens"))
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(n > 1, (e2e - ttft) / (n - 1), np.nan)
    _stats("ttft", ttft, out)
    _stats("tpot", tpot, out)
    _stats("itl", ok.itl(copy=True), out, inplace=True)  # every gap: one copy, used up
    _stats("e2el", e2e, out)
    return out


def run_info(meta: dict[str, Any]) -> dict[str, Any]:
    """vLLM's setup fields from ``run.json``: label, model, tokenizer, prompts, rate, users."""
    config = meta.get("config") or {}
    rate = config.get("rate")
    return {
        "label": meta.get("label"),
        "model_id": meta.get("model"),
        "tokenizer_id": config.get("tokenizer"),
        "num_prompts": config.get("num_prompts"),
        "request_rate": rate if rate is not None else "inf",
        # vLLM: 1.0 is Poisson, "inf" evenly spaced arrivals
        "burstiness": 1.0 if config.get("arrival", "poisson") == "poisson" else "inf",
        "max_concurrency": config.get("users"),
    }


def phase_results(
    records: Sequence[RequestRecord], meta: dict[str, Any], summary: Summary
) -> dict[str, dict[str, Any]]:
    """``{phase: vLLM result}`` for each measured phase of ``summary`` (its duration, goodput)."""
    info = run_info(meta)
    out: dict[str, dict[str, Any]] = {}
    for name, phase in summary.phases.items():
        table = RecordTable.of(records)
        recs = table.where(table.is_("phase", name))
        result = vllm_result(recs, phase.duration_s, good=phase.slo_met, info=info)
        result["llmload"] = {
            "phase": name,
            "mode": phase.mode,
            "run_id": summary.run_id,
            "goodput_slo_ms": summary.slo_ms,
            "definitions": "docs/reports.md#vllm-bench-serve-json",
        }
        out[name] = result
    return out
