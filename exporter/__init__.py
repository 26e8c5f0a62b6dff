"""llmload: live client-side Prometheus metrics from the load generator.

``LiveMetrics`` is the record sink that serves ``/metrics`` (one registry,
``llmload_`` names); ``HealthSampler`` measures a load-generator process (CPU %,
event-loop lag) for ``RecordSink.on_health``; ``exporter.promconfig`` renders
Prometheus scrape configs (compose and tests).
"""

from exporter.health import HealthSampler
from exporter.live import DEFAULT_GRACE_S, DEFAULT_PORT, LiveMetrics

__all__ = ["DEFAULT_GRACE_S", "DEFAULT_PORT", "HealthSampler", "LiveMetrics"]
