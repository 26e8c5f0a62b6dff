"""llmload: live client-side Prometheus metrics from the load generator.

``LiveMetrics`` is the record sink that serves ``/metrics`` (one registry,
``llmload_`` names), fed by ``RecordSink.on_health`` from the load generator's
own ``loadtests.run.health.HealthSampler``; ``exporter.promconfig`` renders
Prometheus scrape configs (compose and tests).
"""

from llmload.exporter.live import DEFAULT_GRACE_S, DEFAULT_PORT, LiveMetrics

if __name__ != "llmload.exporter":  # one module object per module: never a second spelling
    raise ImportError(f"{__name__} installs as llmload.exporter: import that, not {__name__}")

__all__ = ["DEFAULT_GRACE_S", "DEFAULT_PORT", "LiveMetrics"]
