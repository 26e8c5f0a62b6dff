"""``--images``: the generated PNGs, their parts in each API, and the server's count of them."""

from __future__ import annotations

import base64

import pytest

from llmload.common.images import OTHER_IMAGE_TOKENS, png, png_size
from llmload.loadtests.measure.adapters import get_adapter
from llmload.loadtests.measure.adapters.base import Prompt
from llmload.loadtests.options import parse_image_counts, parse_image_size
from llmload.loadtests.workload.images import ImageMaker
from llmload.target_server.images import from_part, from_url
from llmload.target_server.schemas import CHAT, MESSAGES, RESPONSES, parse_request


def decode(url: str) -> bytes:
    head, _, data = url.partition(",")
    assert head == "data:image/png;base64"
    return base64.b64decode(data)


def test_generated_images_are_pngs_of_the_size_asked_and_all_distinct() -> None:
    maker = ImageMaker((2,), (64, 48), seed=3)
    images = [url for _ in range(20) for url in maker.draw()]
    assert len(images) == 40 and len(set(images)) == 40  # no cache serves one from another
    raw = decode(images[0])
    assert png_size(raw) == (64, 48) and len(raw) > 64 * 48 * 3  # stored: noise has no savings
    # the start that identifies an image (the server's prefix-cache key) differs too
    assert len({url[:256] for url in images}) == 40
    # another process (shard) makes other images; the same seed and shard the same ones
    assert ImageMaker((1,), (64, 48), seed=3, shard=1).draw()[0] not in images
    assert ImageMaker((2,), (64, 48), seed=3).draw()[0] == images[0]


def test_counts_are_drawn_from_the_list_and_a_url_is_sent_as_is() -> None:
    maker = ImageMaker((0, 1, 3), (16, 16), seed=1)
    counts = {len(maker.draw()) for _ in range(60)}
    assert counts == {0, 1, 3}
    assert (
        ImageMaker((2,), url="https://img.example/cat.png").draw()
        == ("https://img.example/cat.png",) * 2
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [("", "count"), ("x", "count"), ("0", "one of them > 0"), ("-1,2", ">= 0")],
)
def test_bad_counts(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_image_counts(text)


@pytest.mark.parametrize("text", ["512", "axb", "4x4", "5000x10"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(ValueError, match="--image-size"):
        parse_image_size(text)


def test_the_server_counts_a_png_by_its_patches_and_other_images_flat() -> None:
    url = "data:image/png;base64," + base64.b64encode(png(56, 30, bytes(56 * 30 * 3))).decode()
    assert from_url(url)[1] == 2 * 2  # ceil(56/28) * ceil(30/28)
    assert from_url("https://example.com/a.jpg")[1] == OTHER_IMAGE_TOKENS
    assert from_url("data:image/jpeg;base64,/9j/4AAQ")[1] == OTHER_IMAGE_TOKENS
    b64 = url.partition(",")[2]
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}
    assert from_part(block) == (b64[:256], 4)
    assert from_part({"type": "input_image", "image_url": url}) == (url[:256], 4)
    assert from_part({"type": "text", "text": "x"}) is None
    with pytest.raises(ValueError):
        from_part({"type": "image", "source": "nope"})


@pytest.mark.parametrize(
    ("protocol", "endpoint"),
    [("openai-chat", CHAT), ("openai-responses", RESPONSES), ("anthropic-messages", MESSAGES)],
)
def test_each_api_sends_images_the_server_reads_back(protocol: str, endpoint: str) -> None:
    images = ImageMaker((2,), (56, 56), seed=0).draw()
    history = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "look at these"},
    ]
    prompt = Prompt("s", "p", messages=history, max_tokens=8, images=images)
    body = get_adapter(protocol).build(prompt, mode="stream", model="m", options={}).json or {}
    parsed = parse_request(endpoint, body, "id", "m", 64)
    gen = parsed.generation
    assert [tokens for _, tokens in gen.images] == [4, 4]
    assert len({identity for identity, _ in gen.images}) == 2
    # the text still arrives, the images were in the last user message
    assert gen.messages is not None and gen.messages[-1]["content"] == "look at these"
    assert gen.messages[1]["content"] == "first"
    plain = get_adapter(protocol).build(
        Prompt("s", "p", messages=history, max_tokens=8), mode="stream", model="m", options={}
    )
    assert parse_request(endpoint, plain.json or {}, "id", "m", 64).generation.images == ()


def test_a_broken_image_part_is_a_400() -> None:
    from llmload.target_server.errors import ApiError

    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}
    with pytest.raises(ApiError) as err:
        parse_request(CHAT, body, "id", "m", 64)
    assert err.value.status == 400 and "image" in err.value.message
