"""Keeping prompt + max_tokens inside the target's context length (``loadtests.workload.fit``)."""

from __future__ import annotations

import pytest

from llmload.loadtests.measure.adapters.base import Prompt
from llmload.loadtests.transport.discovery import context_length
from llmload.loadtests.workload.fit import (
    MIN_OUTPUT_TOKENS,
    NOTHING_FITS_AFTER,
    PER_MESSAGE_TOKENS,
    PER_REQUEST_TOKENS,
    ContextFit,
)
from llmload.loadtests.workload.fit import estimate_tokens as est


def _prompt(text: str, max_tokens: int = 256, **kw: object) -> Prompt:
    return Prompt(
        "s", "p", messages=[{"role": "user", "content": text}], max_tokens=max_tokens, **kw
    )


OVERHEAD = PER_MESSAGE_TOKENS + PER_REQUEST_TOKENS


def test_the_estimate_overcounts_real_tokenizers() -> None:
    english = "The quick brown fox jumps over the lazy dog. " * 20
    assert est(english) >= len(english.split())  # BPE: about one token per English word
    assert est("写一首关于春天的七言绝句") >= 2 * 12  # two per CJK character, plus a margin
    assert est("") == 0


def test_prompts_that_fit_pass_unchanged() -> None:
    fit = ContextFit(2048, count=lambda t: len(t.split()))
    p = _prompt("one two three", 100)
    assert fit.fit(p) is p
    assert fit.prompt_tokens(p) == 3 + OVERHEAD
    assert (fit.checked, fit.trimmed, fit.skipped) == (1, 0, 0)
    assert fit.summary_line() is None


def test_max_tokens_is_trimmed_to_the_room_left() -> None:
    fit = ContextFit(1000, count=lambda t: len(t.split()))
    p = _prompt(" ".join(["w"] * 900), 256, min_tokens=200)
    out = fit.fit(p)
    assert out is not None and out.max_tokens == 1000 - 900 - OVERHEAD
    assert out.min_tokens is None  # min_tokens above the room left is dropped
    assert fit.trimmed == 1


def test_prompts_that_leave_no_room_are_skipped_and_counted() -> None:
    fit = ContextFit(2048)  # no tokenizer: the conservative estimate
    long = _prompt("长" * 2100)
    assert fit.fit(long) is None
    room_too_small = 2048 - OVERHEAD - (MIN_OUTPUT_TOKENS - 1)
    assert fit.fit(_prompt("长" * room_too_small)) is None
    assert fit.fit(_prompt("hi")) is not None
    assert fit.describe() == {
        "context_limit": 2048,
        "prompt_tokens": "estimate",
        "checked": 3,
        "trimmed": 0,
        "skipped": 2,
    }
    line = fit.summary_line()
    assert line is not None and "2 of 3 prompts skipped" in line and "estimate" in line


def test_workers_counts_add_up_on_the_master() -> None:
    """A distributed master's fit counts nothing itself: it adds each worker's ``counts()``."""
    workers = [ContextFit(2048), ContextFit(2048)]
    workers[0].fit(_prompt("长" * 2100))
    workers[1].fit(_prompt("hi"))
    workers[1].fit(_prompt("hi", 2040))
    master = ContextFit(2048)
    for w in workers:
        master.add(w.counts())
    assert (master.checked, master.trimmed, master.skipped) == (3, 1, 1)
    assert master.describe()["checked"] == 3


def test_nothing_fits_only_after_enough_draws_all_skipped() -> None:
    fit = ContextFit(2048)
    for _ in range(NOTHING_FITS_AFTER - 1):
        fit.fit(_prompt("长" * 2100))
    assert not fit.nothing_fits  # not yet enough draws to say
    fit.fit(_prompt("长" * 2100))
    assert fit.nothing_fits
    fit.fit(_prompt("hi"))
    assert not fit.nothing_fits  # one fitted: a budget can still be sent


def test_context_length_from_v1_models() -> None:
    vllm = {"data": [{"id": "Qwen/Qwen2.5-7B-Instruct", "max_model_len": 2048}]}
    assert context_length(vllm, "Qwen/Qwen2.5-7B-Instruct") == 2048
    assert context_length(vllm, "other-name") == 2048  # the only model served
    two = {"data": [{"id": "a", "context_length": 4096}, {"id": "b"}]}
    assert context_length(two, "a") == 4096
    assert context_length(two, "b") is None
    assert context_length({"data": [{"id": "x", "max_model_len": True}]}, "x") is None
    assert context_length(None, "x") is None and context_length({"data": "?"}, "x") is None


@pytest.mark.parametrize("limit", [64, 512])
def test_a_fitted_prompt_always_fits(limit: int) -> None:
    fit = ContextFit(limit)
    for n in range(0, 3 * limit, 7):
        p = _prompt("x" * n, 128)
        out = fit.fit(p)
        if out is not None:
            assert fit.prompt_tokens(out) + out.max_tokens <= limit


def test_images_count_by_the_rule_the_server_charges_them() -> None:
    from llmload.common.images import OTHER_IMAGE_TOKENS
    from llmload.loadtests.workload.images import ImageMaker

    images = ImageMaker((2,), (280, 56), seed=0).draw()  # 10 x 2 patches each
    fit = ContextFit(2048, count=lambda t: len(t.split()))
    p = _prompt("one two three", 100, images=images)
    assert fit.prompt_tokens(p) == 3 + OVERHEAD + 2 * 20
    remote = _prompt("one", 100, images=("https://img.example/cat.jpg",))
    assert fit.prompt_tokens(remote) == 1 + OVERHEAD + OTHER_IMAGE_TOKENS
    # an image too large for the room left: the answer is trimmed, then the prompt skipped
    big = ImageMaker((1,), (28 * 40, 28 * 45), seed=0).draw()  # 1,800 tokens
    trimmed = fit.fit(_prompt("one", 256, images=big))
    assert trimmed is not None and trimmed.max_tokens == 2048 - 1 - OVERHEAD - 1800
    assert fit.fit(_prompt("one", 256, images=big + big)) is None
