"""Each known server's families, read from recorded-shape ``/metrics`` texts.

The fixtures (``tests/fixtures/metrics/*.txt``) have each project's names, types,
labels and bucket grids (vLLM's ``loggers.py``, SGLang's ``collector.py``, TGI's
router); the values are made up but known, so what the sampler keeps is checked
number by number.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmload.loadtests import serverfamilies as sf
from llmload.loadtests.run.promsample import CHUNK_LINES, Histo, Sampler, read_sample

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"


def text(name: str) -> str:
    return (FIXTURES / f"{name}.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("server", ["vllm", "sglang", "tgi"])
def test_each_server_is_recognised_and_its_roles_found(server: str) -> None:
    sample = Sampler(sf.known_names()).sample(text(f"{server}-after"), full=True)
    found = sf.detect(sample.names())
    assert found is not None and found.key == server
    expected_roles = {
        "vllm": {"running", "waiting", "kv_usage", "prefix_queries", "prefix_hits"}
        | {"preemptions", "ttft", "itl", "queue", "prefill", "decode", "e2e", "inference"},
        "sglang": {"running", "waiting", "kv_usage", "prefix_hit_rate", "preemptions"}
        | {"ttft", "itl", "queue", "e2e"},
        "tgi": {"running", "waiting", "queue", "tpot", "inference", "e2e"},
    }[server]
    have = {f.role for f in found.families if f.name in sample.names()}
    assert expected_roles <= have
    # the made-up state: 16 running, 23 waiting, 200 requests finished
    running = next(f for f in found.for_role("running") if f.name in sample.values)
    waiting = next(f for f in found.for_role("waiting") if f.name in sample.values)
    assert sample.values[running.name] == 16 and sample.values[waiting.name] == 23
    queue = sample.histograms[found.for_role("queue")[0].name]
    assert queue.count == 200


def test_vllm_values_and_buckets() -> None:
    s = Sampler(sf.known_names()).sample(text("vllm-after"), full=True)
    assert s.values["vllm:kv_cache_usage_perc"] == pytest.approx(0.97)
    assert s.values["vllm:num_preemptions"] == 7  # the counter, without _total
    assert s.values["vllm:prefix_cache_hits"] == 30500
    assert s.values["vllm:prefix_cache_queries"] == 41000
    q = s.histograms["vllm:request_queue_time_seconds"]
    # vLLM's request_latency_buckets grid: 0.3, 0.5, 0.8, 1.0, 1.5, ...
    assert q.le[:4] == [0.3, 0.5, 0.8, 1.0]
    assert q.count_at(0.3) == 68 and q.count_at(0.4) == 68 and q.count_at(float("inf")) == 200
    # families llmload does not know are not kept, nor are _created series
    assert "vllm:iteration_tokens_total" not in s.histograms
    assert not any(n.endswith("_created") for n in s.names())


def test_light_scrape_keeps_counts_not_buckets() -> None:
    sampler = Sampler(sf.known_names())
    light = sampler.sample(text("vllm-after"), full=False)
    full = sampler.sample(text("vllm-after"), full=True)
    for name, h in light.histograms.items():
        assert h.le == [] and h.count == full.histograms[name].count
        assert h.sum == pytest.approx(full.histograms[name].sum)
    assert light.values == full.values
    chosen = sum(len(b) for b in sampler.choose(text("vllm-after"), full=False))
    assert chosen < 60 < len(text("vllm-after").splitlines())


def test_a_named_family_is_kept_and_chunks_pause() -> None:
    pauses = []
    sampler = Sampler(["vllm:iteration_tokens_total", "vllm:request_success"])
    s = sampler.sample(text("vllm-after"), full=True, pause=lambda: pauses.append(1))
    assert s.histograms["vllm:iteration_tokens_total"].count == 200
    assert s.values["vllm:request_success"] == 200  # summed over finished_reason
    assert pauses  # at least one chunk boundary yielded


def test_series_are_summed_and_counted() -> None:
    two = (
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0"} 0.5\n'
        'vllm:kv_cache_usage_perc{engine="1"} 0.7\n'
    )
    s = Sampler(sf.known_names()).sample(two, full=False)
    assert s.values["vllm:kv_cache_usage_perc"] == pytest.approx(1.2)
    assert s.series["vllm:kv_cache_usage_perc"] == 2
    assert read_sample(s.to_json()).series == {"vllm:kv_cache_usage_perc": 2}


def test_big_histograms_are_parsed_in_chunks_and_compacted() -> None:
    bounds = [round(0.001 * 1.05**k, 6) for k in range(300)]
    lines = ["# TYPE llmserve_queue_time_seconds histogram"]
    for b in bounds:
        lines.append(f'llmserve_queue_time_seconds_bucket{{le="{b}"}} {10 if b >= 0.1 else 0}.0')
    lines += [
        'llmserve_queue_time_seconds_bucket{le="+Inf"} 10.0',
        "llmserve_queue_time_seconds_count 10.0",
        "llmserve_queue_time_seconds_sum 1.2",
    ]
    assert len(lines) > 3 * CHUNK_LINES
    h = Sampler(sf.known_names()).sample("\n".join(lines) + "\n", full=True).histograms
    q = h["llmserve_queue_time_seconds"]
    assert q.count == 10 and len(q.le) == 2  # the rise, and the bound below it
    rise = next(b for b in bounds if b >= 0.1)
    assert q.le == [bounds[bounds.index(rise) - 1], rise] and q.cum == [0.0, 10.0]
    assert Histo.from_json(q.to_json()) == q


def test_not_prometheus_text_raises() -> None:
    with pytest.raises(ValueError):
        Sampler(["x"]).sample('# TYPE x gauge\nx{a="1" 2\n', full=False)
