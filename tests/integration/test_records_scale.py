"""An hour of records: ``llmload report build`` reads columns, exactly, in bounded output.

A synthetic run (``bench.records``: ``make loadtest``-shaped records, written by
the run writer) goes through ``llmload report build`` as a user runs it.  Its
``summary.json`` must hold exactly the numbers of the old in-memory path — every
record decoded with ``json`` and each distribution ``MetricStats.of`` over lists
of Python floats, computed here — and its ``report.html`` must not grow with the
number of records.  The same run compressed as written (``.jsonl.gz``,
``.jsonl.zst``) gives the same summary.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import zstandard

from bench.records import write_run
from llmload.loadtests.slo import parse_slo
from llmload.reports.table.schema import MetricStats

ROOT = Path(__file__).resolve().parents[2]
MS = 1000.0
N = 50_000
#: the SLO goodput is counted with when the run names none (as `report build` uses it)
SLO = parse_slo(None)


def build(run_dir: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "llmload", "report", "build", str(run_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    return summary


def reference(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The old in-memory path's numbers for one group of records: its distributions
    (``MetricStats.of`` over lists of floats) and its answers block, as summary.json has them."""
    ok = [r for r in records if r["status"] == "ok"]
    of = MetricStats.of

    def per_token(r: dict[str, Any]) -> list[float]:
        tpe = r["tokens_per_event"]
        if len(tpe) != len(r["itl_s"]) + 1:
            return []
        return [g / n for g, n in zip(r["itl_s"], tpe[1:], strict=True) if n > 0]

    timed = [r for r in ok if r["mode"] == "stream" and r["ttft_s"] is not None]
    timed = [r for r in timed if r["server_ttft_s"] is not None]
    dists = {
        "ttft_ms": of((r["ttft_s"] for r in ok), MS),
        "itl_ms": of((g for r in ok for g in r["itl_s"]), MS),
        "tpot_ms": of((r["tpot_s"] for r in ok), MS),
        "e2e_ms": of((r["e2e_s"] for r in ok), MS),
        "itl_per_token_ms": of((g for r in ok for g in per_token(r)), MS),
        "ttst_ms": of((r["ttst_s"] for r in ok), MS),
        "headers_ms": of((r["headers_s"] for r in ok), MS),
        "output_tokens": of(r["output_tokens"] for r in ok),
        "decode_tokens_per_s": of(1.0 / r["tpot_s"] for r in ok if r["tpot_s"]),
        "ttfo_ms": of((r["ttfo_s"] for r in ok), MS),
        "send_ms": of((r["send_s"] for r in records), MS),
        "connect_ms": of((r["connect_s"] for r in records), MS),
        **(
            {
                "client_minus_server_ttft_ms": of(
                    (r["ttft_s"] - r["server_ttft_s"] for r in timed), MS
                ),
                "server_ttft_ms": of((r["server_ttft_s"] for r in timed), MS),
                "server_queue_ms": of((r["server_queue_s"] for r in timed), MS),
            }
            if timed
            else {}
        ),
    }
    reasoned = [r for r in ok if r["reasoning_tokens"]]
    if reasoned:
        counted = [r for r in ok if r["reasoning_tokens"] is not None]
        dists["reasoning_tokens"] = of(r["reasoning_tokens"] for r in counted)
        dists["answer_tokens"] = of(r["output_tokens"] - r["reasoning_tokens"] for r in counted)
    answers = {
        "ok": len(ok),
        "no_output": sum(r["no_output"] for r in ok),
        "reasoning": len(reasoned),
        "tool_calls": sum(r["tool_calls"] > 0 for r in ok),
        "unknown_events": sum(r.get("unknown_events", 0) for r in ok),
    }
    return {**{name: d.to_json() for name, d in dists.items()}, "answers": answers}


def meets_default_slo(r: dict[str, Any]) -> bool:
    """The old path's goodput test of one record against the default SLO."""
    if r["status"] != "ok":
        return False
    for name, limit_ms in SLO.items():
        value = r[f"{name}_s"]
        if value is None:
            if name == "tpot":
                continue
            return False
        if value * MS > limit_ms:
            return False
    return True


def prefix_reference(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The old path's prefix-cache block of a phase (``cached_tokens`` over prompt tokens)."""
    told = [r for r in records if r["status"] == "ok" and r["cached_tokens"] is not None]
    told = [r for r in told if r["prompt_tokens"]]
    hits = [r for r in told if r["cached_tokens"]]
    misses = [r for r in told if not r["cached_tokens"]]
    prompt = sum(r["prompt_tokens"] for r in told)
    cached = sum(r["cached_tokens"] for r in told)
    return {
        "requests": len(told),
        "hit_requests": len(hits),
        "hit_share": len(hits) / len(told),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "hit_rate": cached / prompt,
        "ttft_hit_ms": MetricStats.of((r["ttft_s"] for r in hits), MS).to_json(),
        "ttft_miss_ms": MetricStats.of((r["ttft_s"] for r in misses), MS).to_json(),
    }


@pytest.fixture(scope="module")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("records") / "run"
    write_run(out, N)
    return out


def test_the_summary_is_exactly_the_in_memory_one(big_run: Path) -> None:
    summary = build(big_run)
    lines = (big_run / "requests.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert summary["input"]["records"] == len(records) == N
    for phase in ("sync", "stream"):
        mine = [r for r in records if r["phase"] == phase]
        groups = {"": mine} | {
            s: [r for r in mine if r["scenario"] == s] for s in {r["scenario"] for r in mine}
        }
        for scenario, group in groups.items():
            block = summary["phases"][phase]
            block = block["scenarios"][scenario] if scenario else block
            assert block["count"] == len(group)
            assert block["ok"] == sum(r["status"] == "ok" for r in group)
            expected = reference(group)
            # answers of every shape are in each group (reasoning: streams only)
            counts = expected["answers"]
            assert counts["no_output"] and counts["tool_calls"], (phase, scenario)
            assert bool(counts["reasoning"]) == (phase == "stream") == ("answer_tokens" in block)
            for name, value in expected.items():
                assert block[name] == value, (phase, scenario, name)
            assert block["slo_met"] == sum(meets_default_slo(r) for r in group)
        assert summary["phases"][phase]["prefix_cache"] == prefix_reference(mine)
    # the vLLM JSON's ITL statistics are the same distribution's
    vllm = json.loads((big_run / "vllm_bench_stream.json").read_text())
    itl = summary["phases"]["stream"]["itl_ms"]
    assert (vllm["p99_itl_ms"], vllm["mean_itl_ms"]) == (itl["p99"], itl["mean"])


def test_the_report_does_not_grow_with_the_records(big_run: Path, tmp_path: Path) -> None:
    small = tmp_path / "small"
    write_run(small, N // 10)
    build(small)
    if not (big_run / "report.html").exists():
        build(big_run)
    big_size = (big_run / "report.html").stat().st_size
    small_size = (small / "report.html").stat().st_size
    # the same charts: sampled scatters, binned series, CDFs of at most 200 points
    assert big_size < 1.2 * small_size, (big_size, small_size)


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_a_compressed_run_gives_the_same_summary(
    big_run: Path, tmp_path: Path, suffix: str
) -> None:
    if not (big_run / "summary.json").exists():
        build(big_run)
    plain = json.loads((big_run / "summary.json").read_text())
    copy = tmp_path / "run"
    copy.mkdir()
    shutil.copy(big_run / "run.json", copy / "run.json")
    data = (big_run / "requests.jsonl").read_bytes()
    packed = gzip.compress(data) if suffix == ".gz" else zstandard.compress(data)
    (copy / f"requests.jsonl{suffix}").write_bytes(packed)
    summary = build(copy)
    for doc in (plain, summary):
        doc.pop("generated_at")
    assert summary == plain
