"""Histogram bucket bounds (seconds) for the client-side metrics.

Explicit constants, so a dashboard author can see which quantiles a
``histogram_quantile`` can resolve: ITL and TPOT start at half a millisecond,
TTFT spans a millisecond to a minute, e2e reaches ten minutes.
"""

from __future__ import annotations

#: Time to first token: loopback synthetic servers (~1 ms) to long-prompt prefill (a minute).
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075,
    0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0,
)  # fmt: skip

#: Inter-token latency and TPOT: half a millisecond (fast decode) to seconds (stalls).
ITL_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075,
    0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
    0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip

#: End-to-end request latency: tens of milliseconds to ten minutes.
E2E_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75,
    1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0,
    60.0, 90.0, 120.0, 180.0, 300.0, 450.0, 600.0,
)  # fmt: skip

#: Open-loop schedule delay (actual minus intended send time): 0.1 ms to 30 s.
SCHEDULE_DELAY_BUCKETS: tuple[float, ...] = (
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
