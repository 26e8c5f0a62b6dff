"""Images in a request: how many prompt tokens each costs, and what identifies it.

A vision model turns an image into prompt tokens before its first output
token; the bundled server charges each image that many tokens of prefill
(the synthetic engine's ``--prefill-ms-per-token``) and counts them in
``usage``, by the rule in ``llmload.common.images`` (one token per 28×28-pixel
patch of a PNG; ``OTHER_IMAGE_TOKENS`` for any other image or a URL it does not
fetch).
An image's identity (for the prefix cache) is the start of its reference, which
for the harness's generated images holds each one's own stamp.
"""

from __future__ import annotations

from typing import Any

from llmload.common.images import tokens_of_base64, tokens_of_url

#: how much of a reference identifies an image (the harness's stamp is within it)
_IDENTITY_CHARS = 256

#: one image: (identity, prompt tokens)
Image = tuple[str, int]


def from_url(url: Any) -> Image:
    """An image given by URL: a ``data:…;base64,`` URL is read, another is not fetched."""
    if not isinstance(url, str) or not url:
        raise ValueError("an image without a URL")
    return url[:_IDENTITY_CHARS], tokens_of_url(url)


def from_part(part: dict[str, Any]) -> Image | None:
    """The image of one content part of any API, or None when it is not an image.

    Chat: ``{"type": "image_url", "image_url": {"url"}}``; Responses: ``{"type":
    "input_image", "image_url"}``; Anthropic: ``{"type": "image", "source": {"type":
    "base64", "data"} | {"type": "url", "url"}}``.
    """
    kind = part.get("type")
    if kind == "image_url":
        ref = part.get("image_url")
        return from_url(ref.get("url") if isinstance(ref, dict) else ref)
    if kind == "input_image":
        return from_url(part.get("image_url"))
    if kind == "image":
        source = part.get("source")
        if not isinstance(source, dict):
            raise ValueError("an image block without a source")
        if source.get("type") == "base64":
            data = source.get("data")
            if not isinstance(data, str) or not data:
                raise ValueError("a base64 image source without data")
            return data[:_IDENTITY_CHARS], tokens_of_base64(data)
        return from_url(source.get("url"))
    return None
