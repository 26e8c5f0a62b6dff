"""How a process that times streams keeps the garbage collector out of its timings.

Two things made CPython's collector the tail of both ends at 1,000 streams
(docs/scale.md, "garbage collector"):

- **Full and middle collections over the start-up heap**: every import, every
  loaded table, rescanned each time.  ``settle`` collects once and freezes what
  is loaded (``gc.freeze``: never scanned again), and keeps full collections rare.
- **A young generation far larger than its threshold**: the young count drops
  with every object freed, old ones included, so while streams end as fast as new
  ones start the count stays near zero and the young generation fills with the
  live streams' objects: at the default 700 the young collections at 1,000 streams
  were tens of thousands of objects and milliseconds long; at 100 they stay short
  (the measurements: docs/scale.md, "The tail was the garbage collector", cause 2).

It cannot help with a request that ends as a reference cycle (only a full
collection frees it): keep those out of the per-request path
(``tests/integration/test_server_gc.py`` checks the server's).
"""

from __future__ import annotations

import gc

#: net allocations between young collections (CPython's default: 700)
YOUNG = 100
#: young collections per middle one (default), middle ones per full one (default 10)
MIDDLE, FULL = 10, 1000


def settle() -> None:
    """Collect, freeze everything alive now, then keep young collections small and full
    ones rare.  Call once, when start-up is done (imports, model, users' classes)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG, MIDDLE, FULL)
