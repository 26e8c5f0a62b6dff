"""vLLM ``bench serve``-compatible result JSON: field names and vLLM's own arithmetic."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports import build_run
from llmload.reports.table.loader import load_run
from llmload.reports.table.vllm_bench import PERCENTILES, vllm_result

T = 1_700_000_000.0
#: the keys ``vllm bench serve --save-result`` writes (vllm/benchmarks/serve.py) without
#: ``--save-detailed``, for the default ``--percentile-metrics ttft,tpot,itl`` and p99
VLLM_KEYS = {
    "date",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl") for s in ("mean", "median", "std", "p99")),
}


def rec(i: int, ttft: float, e2e: float, n: int, itl: list[float], **kw) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}",
        phase="stream",
        scenario="s",
        mode="stream",
        endpoint="/v1/completions",
        started_at=kw.pop("started_at", T + i * 0.5),
        status=kw.pop("status", "ok"),
        ttft_s=ttft,
        e2e_s=e2e,
        output_tokens=n,
        prompt_tokens=kw.pop("prompt_tokens", 100),
        itl_s=itl,
        **kw,
    )


def records() -> list[RequestRecord]:
    out = [
        rec(i, 0.1 + 0.03 * i, 0.5 + 0.1 * i, 10 + i, [0.02 + 0.001 * i] * (9 + i))
        for i in range(7)
    ]
    out.append(rec(7, 0.2, 0.2, 1, []))  # one token: no TPOT, as in vLLM
    out.append(rec(8, None, None, 0, [], status="timeout", prompt_tokens=None))  # type: ignore[arg-type]  # a test value outside the declared type, on purpose
    return out


def test_field_names_are_vllms() -> None:
    result = vllm_result(records(), 10.0, good=5, info={"label": "x", "model_id": "m"})
    missing = (
        VLLM_KEYS
        - set(result)
        - {"tokenizer_id", "num_prompts", "request_rate", "burstiness", "max_concurrency"}
    )
    assert not missing
    assert {f"p{p}_e2el_ms" for p in PERCENTILES} <= set(result)
    json.dumps(result, allow_nan=False)  # plain JSON: no NaN or Infinity


def test_numbers_are_vllms_arithmetic() -> None:
    recs = records()
    ok = [r for r in recs if r.ok]
    result = vllm_result(recs, 10.0, good=5)
    assert (result["completed"], result["failed"]) == (8, 1)
    assert result["total_input_tokens"] == 800  # the failed request's tokens do not count
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    assert result["total_output_tokens"] == out_tokens
    assert result["request_throughput"] == pytest.approx(0.8)
    assert result["request_goodput"] == pytest.approx(0.5)
    assert result["output_throughput"] == pytest.approx(out_tokens / 10)
    assert result["total_token_throughput"] == pytest.approx((800 + out_tokens) / 10)
    ttfts = np.array([r.ttft_s for r in ok])
    tpots = np.array([(r.e2e_s - r.ttft_s) / (r.output_tokens - 1) for r in ok[:7]])
    itls = np.array([g for r in ok for g in r.itl_s])
    e2els = np.array([r.e2e_s for r in ok])
    for name, xs in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        assert result[f"mean_{name}_ms"] == pytest.approx(np.mean(xs) * 1000)
        assert result[f"median_{name}_ms"] == pytest.approx(np.median(xs) * 1000)
        assert result[f"std_{name}_ms"] == pytest.approx(np.std(xs) * 1000)
        for p in PERCENTILES:
            assert result[f"p{p}_{name}_ms"] == pytest.approx(np.percentile(xs, p) * 1000)


def test_peaks_count_overlaps_and_events_per_second() -> None:
    # three requests overlapping in [T, T+1): peak 3; 4 events each in the first second
    recs = [rec(i, 0.1, 0.9, 4, [0.1, 0.1, 0.1], started_at=T + i * 0.01) for i in range(3)]
    recs.append(rec(3, 0.1, 0.5, 2, [0.1], started_at=T + 5))  # alone, later
    result = vllm_result(recs, 6.0)
    assert result["max_concurrent_requests"] == 3
    assert result["max_output_tokens_per_s"] == 12


def test_an_empty_phase_has_nulls_not_zeros() -> None:
    result = vllm_result([rec(0, None, None, 0, [], status="http_5xx")], 1.0)  # type: ignore[arg-type]  # a test value outside the declared type, on purpose
    assert result["completed"] == 0 and result["failed"] == 1
    assert result["mean_ttft_ms"] is None and result["p99_itl_ms"] is None
    assert result["request_goodput"] is None  # no SLO count given


def test_build_run_writes_one_file_per_measured_phase(run_factory: Callable[..., Path]) -> None:
    run_dir = run_factory("v")
    summary = build_run(run_dir)
    for phase in ("sync", "stream"):
        data = json.loads((run_dir / f"vllm_bench_{phase}.json").read_text(encoding="utf-8"))
        stats = summary.phases[phase]
        assert data["llmload"]["phase"] == phase and data["duration"] == stats.duration_s
        assert data["completed"] == stats.ok
        assert data["median_ttft_ms"] == pytest.approx(stats.dist("ttft_ms").p50)
        assert data["p99_ttft_ms"] == pytest.approx(stats.dist("ttft_ms").p99)
        assert data["request_goodput"] == pytest.approx(stats.goodput_per_s)
    assert not (run_dir / "vllm_bench_warmup.json").exists()
    assert len(load_run(run_dir).records) > 0
