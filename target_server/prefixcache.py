"""The synthetic engine's prefix cache: an LRU of fixed-size token blocks, as vLLM's.

A prompt is a sequence of tokens (the synthetic engine's: ``synthetic.prompt_tokens``).
Its full blocks of ``block_size`` tokens each get a key chained over everything
before them (block ``i``'s key stands for tokens ``0 .. (i+1)*block_size``), so a
block matches only when the whole prompt up to its end does — vLLM's automatic
prefix caching and SGLang's radix cache give the same answer for a prefix.

``lookup`` is the scheduling of one request:

* **hit**: the prompt's leading blocks that are cached, never the whole prompt —
  at most ``n - 1`` tokens, rounded down to a block (vLLM always computes the
  last prompt token, so a prompt sent twice is served ``floor((n-1)/bs)*bs``);
* **insert**: then every full block of the prompt is the most recently used, its
  first block most of all (vLLM frees a request's blocks tail first, so a prefix
  outlives its tails); beyond ``capacity`` blocks the least recently used go.

The engine charges prefill for ``n - hit`` tokens.  Two simplifications against a
real server, both documented in docs/server.md: blocks are cached the moment a
request is scheduled (not once its prefill finished), and blocks of running
requests can be evicted like any other.  ``queries`` and ``hits`` count tokens,
as vLLM's ``prefix_cache_queries`` / ``prefix_cache_hits`` do.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence


def block_keys(tokens: Sequence[Hashable], block_size: int) -> list[int]:
    """The chained key of each full block of ``tokens`` (a partial last block has none)."""
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    keys: list[int] = []
    parent = 0
    for end in range(block_size, len(tokens) + 1, block_size):
        parent = hash((parent, *tokens[end - block_size : end]))
        keys.append(parent)
    return keys


class PrefixCache:
    """An LRU of ``capacity`` blocks of ``block_size`` tokens (see the module docstring)."""

    def __init__(self, capacity: int, block_size: int) -> None:
        if capacity < 1 or block_size < 1:
            raise ValueError("a prefix cache needs capacity >= 1 block and block_size >= 1")
        self.capacity = capacity
        self.block_size = block_size
        self._blocks: OrderedDict[int, None] = OrderedDict()
        #: prompt tokens looked up, and of those served from the cache (vLLM's counters)
        self.queries = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def lookup(self, keys: Sequence[int], n_tokens: int) -> int:
        """Schedule a prompt of ``n_tokens`` with block ``keys``: its cached tokens (then cached).

        ``keys`` are ``block_keys`` of the prompt's tokens.
        """
        blocks = self._blocks
        usable = max(0, n_tokens - 1) // self.block_size
        matched = 0
        for key in keys[:usable]:
            if key not in blocks:
                break
            matched += 1
        for key in reversed(keys):  # a prompt's tail goes first, its head last (as vLLM frees)
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)
        cached = matched * self.block_size
        self.queries += n_tokens
        self.hits += cached
        return cached
