"""Images attached to requests (``--images``, ``--image-size``, ``--image-url``).

A vision model's prefill is where images cost: each image is a few hundred
prompt tokens the server counts (``usage.prompt_tokens``) and computes before the
first token.  ``ImageMaker`` makes the images a run sends: PNGs of seeded noise
as ``data:`` URLs, each one distinct (its pixels start with the request's own
number), so no prefix or multimodal cache can serve one from another — or, with
``--image-url``, that URL every time (the server fetches it: a cache may).

``--images`` is a count (``2``) or a list of counts (``0,1,4``): each request draws
one from the list, seeded, so one run holds requests with several counts and the
report splits TTFT by them (``ttft_by_images_ms``).

Cost on the load generator: noise does not compress, so the PNG is written
with zlib's stored blocks (no compression work) and its bytes are what the
image holds (512×512 RGB: 768 KiB, about 1 MiB as base64) — as large as a
photo's upload, and made in about a millisecond.
"""

from __future__ import annotations

import base64
import random
import struct
from dataclasses import dataclass

from llmload.common.images import png
from llmload.loadtests.options import parse_image_counts, parse_image_size

__all__ = ["DEFAULT_SIZE", "ImageMaker", "parse_image_counts", "parse_image_size"]

#: the image size when ``--image-size`` is not given
DEFAULT_SIZE = (512, 512)


@dataclass
class ImageMaker:
    """The images of one load-generator process (``shard``: its number, so two processes'
    images differ too)."""

    counts: tuple[int, ...]
    size: tuple[int, int] = DEFAULT_SIZE
    url: str | None = None
    seed: int = 0
    shard: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(f"images-{self.seed}-{self.shard}")
        w, h = self.size
        self._noise = self._rng.randbytes(w * h * 3)  # one field of noise, stamped per image
        self._made = 0

    def draw(self) -> tuple[str, ...]:
        """The next request's images (as many as a count drawn from ``counts``)."""
        n = self.counts[0] if len(self.counts) == 1 else self._rng.choice(self.counts)
        return tuple(self.image() for _ in range(n))

    def image(self) -> str:
        """One image: ``--image-url``'s URL, or a PNG ``data:`` URL no other image equals."""
        if self.url is not None:
            return self.url
        self._made += 1
        stamp = struct.pack(">QQ", self.shard, self._made) + self._rng.randbytes(16)
        pixels = stamp + self._noise[len(stamp) :]
        w, h = self.size
        return "data:image/png;base64," + base64.b64encode(png(w, h, pixels)).decode("ascii")
