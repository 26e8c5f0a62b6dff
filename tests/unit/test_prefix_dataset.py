"""``--dataset prefix``: exact lengths, shared prefixes, the group draw; ``cached_tokens`` read
from usage; the summary's prefix-cache block."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from llmload.loadtests.measure.adapters import get_adapter
from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.options import RunOptions, build_options
from llmload.loadtests.workload.build import build_workload
from llmload.loadtests.workload.prefix_dataset import PrefixPrompts, zipf_weights
from llmload.loadtests.workload.random_dataset import RandomPrompts, default_codec
from llmload.loadtests.workload.tokencount import Codec
from llmload.reports.workloads.measure import prefix_cache
from tests.fixtures.tokenizer import merging_codec


@pytest.fixture(scope="module")
def embedded() -> Codec:
    return default_codec()


def test_prompts_are_prefix_plus_suffix_tokens_exactly(embedded: Codec) -> None:
    make = PrefixPrompts(RandomPrompts(embedded), groups=3, prefix_len=50, suffix_len=7)
    rng = random.Random(1)
    by_group: dict[str, list[str]] = {}
    for _ in range(30):
        item = make(rng)
        text = item.prompt or ""
        assert len(embedded.encode(text)) == 57
        assert item.max_tokens == item.min_tokens == 128 and item.scenario == "prefix"
        by_group.setdefault(item.item_id.split("-")[0], []).append(text)
    assert len(by_group) == 3
    for g, texts in by_group.items():
        prefix = " ".join(make.prefixes[int(g[1:])]) + " "
        assert all(t.startswith(prefix) for t in texts)
        assert len(set(texts)) == len(texts)  # the suffixes are each request's own


def test_a_tokenizer_that_merges_across_words_gets_its_suffix_corrected(embedded: Codec) -> None:
    odd = merging_codec(embedded, 600)
    make = PrefixPrompts(RandomPrompts(odd), groups=2, prefix_len=120, suffix_len=10)
    assert make.make.additive is False
    rng = random.Random(2)
    for _ in range(6):
        item = make(rng)
        assert len(odd.encode(item.prompt or "")) == 130
        assert (item.prompt or "").startswith(" ".join(make.prefixes[int(item.item_id[1])]))


def test_groups_are_drawn_with_zipf_weights(embedded: Codec) -> None:
    assert zipf_weights(3, 0.0) == [1.0, 1.0, 1.0]
    assert zipf_weights(3, 1.0) == pytest.approx([1.0, 0.5, 1 / 3])
    make = PrefixPrompts(RandomPrompts(embedded), groups=4, prefix_len=4, suffix_len=2, skew=1.2)
    rng = random.Random(3)
    counts = Counter(make.group_of(rng) for _ in range(20000))
    weights = zipf_weights(4, 1.2)
    for g in range(4):
        assert counts[g] / 20000 == pytest.approx(weights[g] / sum(weights), abs=0.015)


def test_the_prefix_options_and_the_workload_they_build() -> None:
    opts = build_options({}, {"dataset": ["prefix"], "prefix_groups": 2, "prefix_len": 8})
    workload = build_workload(opts.workload, seed=5)
    gen = workload.describe()["pools"]["prefix"]["generator"]
    assert gen["groups"] == 2 and gen["prefix_len"] == 8 and gen["suffix_len"] == 256
    assert workload.for_user(0).next().max_tokens == 128
    for bad, msg in [
        ({"prefix_len": 8}, "need --dataset prefix"),
        ({"dataset": ["prefix"], "max_tokens": 8}, "--dataset prefix: give output lengths"),
        ({"dataset": ["prefix"], "prefix_skew": -1.0}, "--prefix-skew must be >= 0"),
        ({"dataset": ["prefix"], "prefix_groups": 0}, "--prefix-groups must be >= 1"),
    ]:
        with pytest.raises(ValueError, match=msg):
            build_options({}, bad)
    assert RunOptions().workload.prefix_skew == 0.0


def test_cached_tokens_are_read_from_usage() -> None:
    adapter = get_adapter("openai-chat")
    usage = (
        '{"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":3,'
        '"prompt_tokens_details":{"cached_tokens":32}}}'
    )
    assert adapter.parse_event(None, usage).usage_cached_tokens == 32
    plain = '{"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":3}}'
    assert adapter.parse_event(None, plain).usage_cached_tokens is None
    null = (
        '{"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":3,'
        '"prompt_tokens_details":null}}'
    )
    assert adapter.parse_event(None, null).usage_cached_tokens is None
    body = (
        b'{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":9,"completion_tokens":1,"prompt_tokens_details":'
        b'{"cached_tokens":0}}}'
    )
    assert adapter.parse_body(body).usage_cached_tokens == 0


def rec(cached: int | None, prompt: int, ttft: float, status: str = "ok") -> RequestRecord:
    return RequestRecord(
        "r", "stream", "prefix", "stream", "/v1/chat/completions", 0.0, status,
        ttft_s=ttft, prompt_tokens=prompt, cached_tokens=cached,
    )  # fmt: skip


def test_the_prefix_cache_block_counts_tokens_and_splits_ttft() -> None:
    block = prefix_cache(
        [rec(0, 100, 0.5), rec(96, 100, 0.1), rec(80, 100, 0.2), rec(None, 100, 0.3),
         rec(50, 100, 0.9, status="timeout")]
    )  # fmt: skip
    assert block is not None
    assert (block["requests"], block["hit_requests"]) == (3, 2)
    assert block["hit_rate"] == pytest.approx(176 / 300)
    assert block["ttft_hit_ms"]["p50"] == pytest.approx(150.0)
    assert block["ttft_miss_ms"]["n"] == 1 and block["ttft_miss_ms"]["p50"] == pytest.approx(500)
    assert prefix_cache([rec(None, 100, 0.3)]) is None
