"""Server-side Prometheus metrics (``llmserve_*``), one registry per app.

Every request is counted exactly once in ``llmserve_requests_total`` with one
of ``STATUSES``; latency histograms are observed when the request finishes
(ITL gaps as they happen), on ``llmload.common.buckets.LATENCY_BUCKETS``, the
grid the client-side exporter uses too.  Counters and histograms are the lock-free
families of ``llmload.common.families`` (no locks, no ``*_created`` series, a
scrape rendered in about a millisecond); running/waiting gauges and the
engine's extra gauges are read at scrape time, so they are never stale.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmload.common.buckets import LATENCY_BUCKETS
from llmload.common.families import HistogramChild, LabelledHistogram, LabelledValue

#: ``status`` label values of ``llmserve_requests_total``
STATUSES = {
    "ok": "completed normally",
    "cancelled": "the client went away before the end",
    "bad_request": "400: malformed JSON, schema error, bad max_tokens, prompt too long",
    "unauthorized": "401: missing or wrong API key",
    "not_found": "404: unknown model",
    "too_large": "413: body over 4 MiB",
    "client_timeout": "408: the request body stopped coming for --client-body-timeout",
    "rejected": "429: admission queue full",
    "unavailable": "503: engine not ready",
    "error": "500 before streaming, or an engine error mid-stream",
    "timeout": "--request-timeout expired (504, or an error event mid-stream)",
    "disconnect": "injected: connection dropped mid-stream (--disconnect-rate)",
    "stall": "injected: a stall happened, the request then completed (--stall-rate)",
    "malformed": "injected: one broken SSE line was sent (--malformed-rate)",
}

#: per-request decode speed, tokens/s
TPS_BUCKETS = (
    1.0,
    2.0,
    5.0,
    10.0,
    15.0,
    20.0,
    25.0,
    30.0,
    40.0,
    50.0,
    60.0,
    75.0,
    100.0,
    125.0,
    150.0,
    200.0,
    300.0,
    500.0,
    750.0,
    1000.0,
    2000.0,
    5000.0,
    10000.0,
)


class _LiveGauges(Collector):
    """Gauges computed at scrape time from callables."""

    def __init__(self, read: Callable[[], dict[str, tuple[str, float]]]):
        self._read = read

    def collect(self) -> Iterator[Metric]:
        for name, (doc, value) in self._read().items():
            yield GaugeMetricFamily(name, doc, value=value)


class ServerMetrics:
    """The ``llmserve_*`` metric objects of one app (updated from its event loop only)."""

    def __init__(self, gauges: Callable[[], dict[str, tuple[str, float]]]):
        self.registry = CollectorRegistry(auto_describe=False)
        reg, lbl = self.registry, ("endpoint", "stream")
        self.ttft = LabelledHistogram(
            "llmserve_time_to_first_token_seconds",
            "Arrival to first content event written (non-stream: first token generated).",
            lbl,
            LATENCY_BUCKETS,
            registry=reg,
        )
        self.itl = LabelledHistogram(
            "llmserve_inter_token_latency_seconds",
            "Gap between consecutive content events (non-stream: tokens generated).",
            lbl,
            LATENCY_BUCKETS,
            registry=reg,
        )
        self.e2e = LabelledHistogram(
            "llmserve_e2e_request_latency_seconds",
            "Arrival to last byte of successful requests.",
            lbl,
            LATENCY_BUCKETS,
            registry=reg,
        )
        self.queue = LabelledHistogram(
            "llmserve_queue_time_seconds",
            "Arrival to admission (a generation slot).",
            lbl,
            LATENCY_BUCKETS,
            registry=reg,
        )
        self.decode = LabelledHistogram(
            "llmserve_decode_tokens_per_second",
            "Per request (output tokens - 1) / (last token - first token).",
            lbl,
            TPS_BUCKETS,
            registry=reg,
        )
        self.prompt_tokens = LabelledValue(
            "llmserve_prompt_tokens",
            "Prompt tokens of admitted requests.",
            ("endpoint",),
            registry=reg,
        )
        self.output_tokens = LabelledValue(
            "llmserve_output_tokens",
            "Output tokens generated (and sent, when streaming).",
            ("endpoint",),
            registry=reg,
        )
        self.prefix_queries = LabelledValue(
            "llmserve_prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache (vLLM: prefix_cache_queries).",
            ("endpoint",),
            registry=reg,
        )
        self.prefix_hits = LabelledValue(
            "llmserve_prefix_cache_hits",
            "Prompt tokens served from the prefix cache (vLLM: prefix_cache_hits).",
            ("endpoint",),
            registry=reg,
        )
        self.requests = LabelledValue(
            "llmserve_requests",
            "Requests by final status (see README: ok, cancelled, bad_request, rejected, ...).",
            ("endpoint", "stream", "status"),
            registry=reg,
        )
        self._families = (
            self.ttft,
            self.itl,
            self.e2e,
            self.queue,
            self.decode,
            self.prompt_tokens,
            self.output_tokens,
            self.prefix_queries,
            self.prefix_hits,
            self.requests,
        )
        live = _LiveGauges(gauges)
        reg.register(live)
        self._gauges = CollectorRegistry(auto_describe=False)
        self._gauges.register(live)

    def render(self) -> bytes:
        """The ``/metrics`` body (text format 0.0.4): the families, then the scrape-time gauges."""
        return "".join(f.render() for f in self._families).encode() + generate_latest(self._gauges)

    def labels(self, endpoint: str, stream: bool) -> tuple[HistogramChild, ...]:
        """Bound (ttft, itl, e2e, queue, decode) children for one label pair."""
        s = "true" if stream else "false"
        return tuple(
            h.labels(endpoint, s) for h in (self.ttft, self.itl, self.e2e, self.queue, self.decode)
        )
