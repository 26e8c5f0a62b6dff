"""The record hub: one place that hands every event to every sink, exactly once.

The hub lives in the process that owns the run's output (the local process or
the locust master).  It drops a record whose ``request_id`` it has already
seen (the last line of defence against a batch delivered twice), counts what
it saw, and isolates sinks from each other: a sink that raises is logged once
and kept, so a broken exporter cannot cost the run its ``requests.jsonl``.
"""

from __future__ import annotations

import logging

from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.run.sinks import HarnessHealth, RecordSink

log = logging.getLogger(__name__)


class RecordHub:
    """Fan-out to sinks with request-id de-duplication; itself a ``RecordSink``."""

    def __init__(self, sinks: list[RecordSink] | None = None) -> None:
        self.sinks: list[RecordSink] = list(sinks or [])
        self._seen: set[str] = set()
        self.records = 0
        self.duplicates = 0
        self.started = 0
        self._failed: set[tuple[int, str]] = set()

    def add(self, sink: RecordSink) -> None:
        """Attach another sink (before records flow)."""
        self.sinks.append(sink)

    def _each(self, method: str, *args: object) -> None:
        for sink in self.sinks:
            try:
                getattr(sink, method)(*args)
            except Exception:
                key = (id(sink), method)
                if key not in self._failed:
                    self._failed.add(key)
                    log.exception("sink %s.%s failed", type(sink).__name__, method)

    def on_request_start(self, mode: str, scenario: str, endpoint: str) -> None:
        self.started += 1
        self._each("on_request_start", mode, scenario, endpoint)

    def on_record(self, record: RequestRecord) -> None:
        if record.request_id in self._seen:
            self.duplicates += 1
            return
        self._seen.add(record.request_id)
        self.records += 1
        self._each("on_record", record)

    def on_users(self, n: int) -> None:
        self._each("on_users", n)

    def on_health(self, source: str, snapshot: HarnessHealth) -> None:
        self._each("on_health", source, snapshot)

    def on_phase(self, name: str, mode: str, event: str, at: float) -> None:
        self._each("on_phase", name, mode, event, at)

    def close(self) -> None:
        self._each("close")
