"""The synthetic engine's prefix cache: block keys, hits, LRU eviction, and the TTFT it buys."""

from __future__ import annotations

from time import perf_counter

import pytest

from llmload.target_server.engine import GenerationRequest, build_engine
from llmload.target_server.prefixcache import PrefixCache, block_keys
from llmload.target_server.settings import Settings
from llmload.target_server.synthetic import count_tokens, prompt_tokens


def toks(*names: str) -> list[str]:
    return list(names)


def test_block_keys_cover_full_blocks_only_and_chain_over_the_prefix():
    assert len(block_keys(list("abcdefghij"), 4)) == 2  # "ij" is a partial block
    a = block_keys(list("abcdxyzw"), 4)
    b = block_keys(list("efghxyzw"), 4)
    assert a[0] != b[0]
    assert a[1] != b[1]  # the same tokens after another prefix are another block
    assert block_keys(list("abcdxyzw"), 4) == a
    with pytest.raises(ValueError):
        block_keys(["a"], 0)


def test_a_prompt_sent_again_is_served_all_but_its_last_token_rounded_to_a_block():
    cache = PrefixCache(capacity=100, block_size=4)
    prompt = [f"t{i}" for i in range(10)]  # blocks [0,4) [4,8); 2 tokens left over
    keys = block_keys(prompt, 4)
    assert cache.lookup(keys, len(prompt)) == 0
    assert cache.lookup(keys, len(prompt)) == 8  # floor((10-1)/4)*4
    exact = [f"t{i}" for i in range(8)]  # a block-aligned prompt: its last block recomputed
    assert cache.lookup(block_keys(exact, 4), 8) == 4  # floor((8-1)/4)*4
    assert (cache.queries, cache.hits) == (28, 12)


def test_a_shared_prefix_hits_up_to_its_last_full_block():
    cache = PrefixCache(capacity=100, block_size=4)
    shared = [f"s{i}" for i in range(11)]
    first = shared + ["a"] * 6
    second = shared + ["b"] * 6
    cache.lookup(block_keys(first, 4), len(first))
    # blocks 0, 1 hold only shared tokens; block 2 = s8 s9 s10 + a/b differs
    assert cache.lookup(block_keys(second, 4), len(second)) == 8


def test_least_recently_used_blocks_go_first_and_a_prompts_tail_before_its_head():
    cache = PrefixCache(capacity=3, block_size=2)
    a = [f"a{i}" for i in range(5)]  # 2 full blocks
    b = [f"b{i}" for i in range(5)]
    cache.lookup(block_keys(a, 2), 5)
    cache.lookup(block_keys(b, 2), 5)  # 4 blocks wanted, 3 kept: a's tail block went
    assert len(cache) == 3
    assert cache.lookup(block_keys(a, 2), 5) == 2  # a's head is still there
    long = [f"c{i}" for i in range(9)]  # 4 blocks into 3: its own tail is dropped
    cache.lookup(block_keys(long, 2), 9)
    assert cache.lookup(block_keys(long, 2), 9) == 6
    with pytest.raises(ValueError):
        PrefixCache(0, 16)


def chat(*contents: str, role: str = "user") -> GenerationRequest:
    messages = [{"role": "system", "content": contents[0]}]
    messages += [{"role": role, "content": c} for c in contents[1:]]
    return GenerationRequest("r", messages=messages, prompt=None, max_tokens=4, ignore_eos=True)


@pytest.mark.parametrize(
    "request_",
    [
        chat("", "x"),
        chat("a" * 13, "héllo wörld", "中文字符"),
        GenerationRequest("r", messages=None, prompt="", max_tokens=1),
        GenerationRequest("r", messages=None, prompt="abcdefghi", max_tokens=1),
    ],
)
def test_the_synthetic_tokens_are_what_the_engine_counts(request_):
    assert len(prompt_tokens(request_)) == count_tokens(request_)


def test_the_engine_charges_prefill_for_uncached_tokens_only():
    eng = build_engine(
        Settings(ttft_ms=10, prefill_ms_per_token=2, prefix_cache_blocks=64, block_size=16)
    )
    system = "s" * 400  # 100 tokens after its 4 role tokens
    first = eng.prepare(chat(system, "question one"))
    again = eng.prepare(chat(system, "another question"))
    n1, n2 = first.prompt_tokens, again.prompt_tokens
    since = perf_counter()
    t1, _ = next(eng.timetable(first, since=since))
    t2, _ = next(eng.timetable(again, since=since))
    assert first.prefix is not None and first.prefix.tokens == 0
    # system 4 + 100 tokens, user's 4 role tokens: 108 shared -> 6 blocks of 16
    assert again.prefix is not None and again.prefix.tokens == 96
    assert t1 - since == pytest.approx((10 + 2 * n1) / 1000)
    assert t2 - since == pytest.approx((10 + 2 * (n2 - 96)) / 1000)
    assert eng.cache is not None and (eng.cache.queries, eng.cache.hits) == (n1 + n2, 96)


def test_no_prefix_cache_unless_asked():
    eng = build_engine(Settings(prefill_ms_per_token=2))
    prepared = eng.prepare(chat("s" * 400, "q"))
    assert eng.cache is None and prepared.prefix is None
