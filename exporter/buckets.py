"""Histogram bucket bounds (seconds) for the client-side metrics.

The latency histograms (TTFT, ITL, TPOT, e2e) use ``LATENCY_BUCKETS``, the grid
the bundled server's ``llmserve_*`` histograms use too (``llmload.common.buckets``,
a standard-library-only module both sides import), so client and server
quantiles come off the same bounds.  Schedule delay is the harness's own and
keeps a coarser grid of its own.
"""

from __future__ import annotations

from llmload.common.buckets import LATENCY_BUCKETS

#: Open-loop schedule delay (actual minus intended send time): 0.1 ms to 30 s.
SCHEDULE_DELAY_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)

__all__ = ["LATENCY_BUCKETS", "SCHEDULE_DELAY_BUCKETS"]
