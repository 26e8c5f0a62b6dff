"""llmload.common.gcpolicy: what a timing process does to the collector once started."""

from __future__ import annotations

import gc

from llmload.common import gcpolicy


def test_settle_freezes_the_start_up_heap_and_keeps_young_collections_small():
    before = gc.get_threshold()
    try:
        gc.unfreeze()
        loaded = [[i] for i in range(1000)]  # alive at start-up: frozen, never scanned again
        gcpolicy.settle()
        assert gc.get_freeze_count() >= len(loaded)
        assert gc.get_threshold() == (gcpolicy.YOUNG, gcpolicy.MIDDLE, gcpolicy.FULL)
        assert gcpolicy.YOUNG < 700  # below CPython's default: see the module docstring
        assert gc.get_count()[0] < gcpolicy.YOUNG + 50  # the collection ran
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
