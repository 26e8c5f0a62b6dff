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
  linear interpolation (the same as ``reports.stats``);
* ``max_output_tokens_per_s`` counts content events per wall-clock second, as vLLM
  counts chunks; ``max_concurrent_requests`` is the peak of overlapping successful
  requests.

An empty distribution is ``null`` where vLLM writes 0.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.schema import Summary, finite_sorted
from llmload.reports.stats import percentile

#: vLLM's default ``--metric-percentiles`` is 99; the others are there for free
PERCENTILES = (50, 90, 95, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")
MS = 1000.0


def vllm_tpot_s(r: RequestRecord) -> float | None:
    """vLLM's TPOT: ``(e2e - ttft) / (output_tokens - 1)``; None below two tokens."""
    n = r.output_tokens or 0
    if r.e2e_s is None or r.ttft_s is None or n <= 1:
        return None
    return (r.e2e_s - r.ttft_s) / (n - 1)


def _stats(name: str, values: Iterable[float | None], out: dict[str, Any]) -> None:
    xs = finite_sorted(values, MS)
    if not xs:
        out.update({f"mean_{name}_ms": None, f"median_{name}_ms": None, f"std_{name}_ms": None})
        out.update({f"p{p}_{name}_ms": None for p in PERCENTILES})
        return
    mean = math.fsum(xs) / len(xs)
    out[f"mean_{name}_ms"] = mean
    out[f"median_{name}_ms"] = percentile(xs, 50)
    out[f"std_{name}_ms"] = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / len(xs))
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = percentile(xs, p)


def _peaks(ok: Sequence[RequestRecord]) -> tuple[float, int]:
    """(content events in the busiest wall-clock second, most requests in flight at once)."""
    if not ok:
        return 0.0, 0
    t0 = min(r.started_at for r in ok)
    buckets: dict[int, int] = {}
    edges: list[tuple[float, int]] = []
    for r in ok:
        end = r.started_at + (r.e2e_s or 0.0)
        edges += [(r.started_at, 1), (end, -1)]
        if r.ttft_s is None:
            continue
        at = r.started_at + r.ttft_s
        for gap in [0.0, *r.itl_s]:
            at += gap
            second = int(at - t0)
            buckets[second] = buckets.get(second, 0) + 1
    inflight = peak = 0
    for _, delta in sorted(edges):  # an end before a start at the same instant
        inflight += delta
        peak = max(peak, inflight)
    return float(max(buckets.values(), default=0)), peak


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
    ok = [r for r in records if r.ok]
    total_in = sum(r.prompt_tokens or 0 for r in ok)
    total_out = sum(r.output_tokens or 0 for r in ok)
    dur = max(duration_s, 1e-9)
    peak_tokens, peak_inflight = _peaks(ok)
    out: dict[str, Any] = {
        "date": time.strftime("%Y%m%d-%H%M%S"),
        "backend": "llmload",
        **(info or {}),
        "duration": duration_s,
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / dur,
        "request_goodput": None if good is None else good / dur,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_inflight,
    }
    _stats("ttft", (r.ttft_s for r in ok), out)
    _stats("tpot", (vllm_tpot_s(r) for r in ok), out)
    _stats("itl", (g for r in ok for g in r.itl_s), out)
    _stats("e2el", (r.e2e_s for r in ok), out)
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
        recs = [r for r in records if r.phase == name]
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
