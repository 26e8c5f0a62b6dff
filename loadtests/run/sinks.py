"""Where records go once they are born: the plugin contract for record consumers.

The run writer (``requests.jsonl``) and the live exporter are both sinks.  The
runner calls them in the process that owns the run's output: the local process
for a single-process run, the locust *master* for a distributed run (workers
forward their records and health snapshots to the master, so every sink sees
every record exactly once).

Contract:

* ``on_request_start(mode, scenario, endpoint)`` — a request was handed to the
  HTTP client.  Every ``on_request_start`` is later matched by exactly one
  ``on_record`` with the same labels, so ``started - recorded`` is the number
  of requests in flight.
* ``on_record(record)`` — the request ended (any status).  Called exactly once
  per issued request.
* ``on_users(n)`` — the number of active simulated users changed.
* ``on_health(source, snapshot)`` — a load-generator process (``"local"`` or a
  worker id) reports its own health: ``HarnessHealth``.
* ``on_phase(name, mode, event)`` — a phase started (``event="start"``) or ended
  (``"end"``); wall-clock time in ``HarnessHealth``-independent ``time.time()``.
* ``close()`` — the run is over; flush and release.

Sinks must be quick: they run on the load generator's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from llmload.loadtests.measure.record import RequestRecord


@dataclass(frozen=True, slots=True)
class HarnessHealth:
    """How busy a load-generator process is (is the client the bottleneck?)."""

    cpu_percent: float
    loop_lag_s: float
    inflight: int
    #: the host's CPU time taken by the hypervisor for other guests since the previous
    #: sample (``steal`` in /proc/stat), % of all its CPUs' time; 0 where not reported
    steal_percent: float = 0.0


@runtime_checkable
class RecordSink(Protocol):
    def on_request_start(self, mode: str, scenario: str, endpoint: str) -> None: ...

    def on_record(self, record: RequestRecord) -> None: ...

    def on_users(self, n: int) -> None: ...

    def on_health(self, source: str, snapshot: HarnessHealth) -> None: ...

    def on_phase(self, name: str, mode: str, event: str, at: float) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class WebTab(Protocol):
    """A sink that also shows itself in locust's web UI (``--web``): the runner calls
    ``attach(environment.web_ui)`` once the UI exists."""

    def attach(self, web_ui: object) -> None: ...


class NullSink:
    """A sink that ignores everything; subclass it to implement only what you need."""

    def on_request_start(self, mode: str, scenario: str, endpoint: str) -> None:
        return None

    def on_record(self, record: RequestRecord) -> None:
        return None

    def on_users(self, n: int) -> None:
        return None

    def on_health(self, source: str, snapshot: HarnessHealth) -> None:
        return None

    def on_phase(self, name: str, mode: str, event: str, at: float) -> None:
        return None

    def close(self) -> None:
        return None
