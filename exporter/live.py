"""``LiveMetrics``: the load generator's client-side Prometheus metrics, as a record sink.

One instance owns one ``CollectorRegistry``.  The runner adds it to the run's
sinks in the process that sees every record (the local process, or the locust
master in a distributed run), calls ``start`` to serve ``/metrics``, and
``close`` at the end of the run.  Call the sink methods from one thread — the
load generator's event loop, as the record hub does: the per-request metrics
are lock-free (``llmload.common.families``); ``on_health`` may come from any thread.

What feeds what:

* ``llmload_requests_total{mode,scenario,endpoint,status}`` and
  ``llmload_output_tokens_total{mode,scenario,endpoint}`` count *every* record,
  warm-up included, so ``sum(llmload_requests_total)`` equals the number of
  lines in ``requests.jsonl`` and matches what the target itself counted.
* ``llmload_reasoning_tokens_total`` (the part of the output tokens that was
  reasoning), ``llmload_no_output_responses_total`` (ok responses whose tokens
  showed nothing: no TTFT) and ``llmload_inputs_total`` (embeddings' inputs and
  rerank's documents: a run without streams has no tokens to count) count every
  record the same way.
* The latency histograms (TTFT, TTFO, ITL, TPOT, e2e) take only ``ok``, non-warm-up
  records — the same population as the reports' statistics.  A failed request
  has no meaningful latency; its failure shows in ``requests_total{status}``.
* ``llmload_schedule_delay_seconds`` takes every non-warm-up record that has a
  schedule delay, whatever its status: the delay is the harness's, not the target's.
* User-derived label values are capped: the first ``MAX_SCENARIOS`` scenarios and
  ``MAX_ENDPOINTS`` endpoints keep their names, later ones are exported as
  ``other`` (``exporter.labels``), so a dataset naming hundreds of scenarios
  cannot multiply the series count.
* The field's workloads (``exporter.workloads``): prefix-cache prompt tokens and hits
  (``--dataset prefix``, any run whose target reports ``cached_tokens``), agent
  TTFT by session step (``--dataset agent``; steps capped like scenarios).
* ``--gpu-metrics``: the GPUs' power, utilization and energy since the run began
  (``exporter.gpu``, ``watch_gpu``).
* ``llmload_run_info{run,label,model,target_host} 1`` names the run
  (``describe_run``), so a dashboard can tell runs apart.
* Harness health is the maximum over the load-generator processes that
  reported within ``health_ttl_s``: the busiest one is the one that can become
  the bottleneck, and the label set stays fixed.  CPU % is each process's
  latest snapshot; event-loop lag is the worst lag any process reported in
  the last ``LAG_WINDOW_S`` seconds, so a stall between two scrapes is not lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge, Info, generate_latest, push_to_gateway

from llmload.common.families import Cell, HistogramChild, LabelledHistogram, LabelledValue
from llmload.exporter.buckets import LATENCY_BUCKETS, SCHEDULE_DELAY_BUCKETS
from llmload.exporter.gpu import GpuCollector
from llmload.exporter.labels import CappedLabel, target_host
from llmload.exporter.server import MetricsServer
from llmload.exporter.workloads import WorkloadMetrics
from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.run.scrape import ServerScraper
from llmload.loadtests.run.sinks import HarnessHealth

log = logging.getLogger(__name__)

#: The port ``make loadtest`` serves the exporter on (``--metrics-port``).
DEFAULT_PORT = 9646
#: After the run, keep serving up to this long so Prometheus's final scrape is not lost.
DEFAULT_GRACE_S = 5.0
#: A load-generator process that has not reported health for this long no longer counts.
DEFAULT_HEALTH_TTL_S = 10.0
#: ``llmload_event_loop_lag_seconds`` is the worst lag reported within this window.
LAG_WINDOW_S = 5.0
#: scenario names past this many are exported as ``scenario="other"``
MAX_SCENARIOS = 20
#: endpoints past this many are exported as ``endpoint="other"``
MAX_ENDPOINTS = 5

LATENCY_LABELS = ("mode", "scenario", "endpoint")
REQUEST_LABELS = (*LATENCY_LABELS, "status")

Key = tuple[str, str, str]


@dataclass(slots=True)
class _Series:
    """The per-(mode, scenario, endpoint) children, looked up once."""

    key: Key  # the label values after capping
    ttft: HistogramChild
    ttfo: HistogramChild
    itl: HistogramChild
    tpot: HistogramChild
    e2e: HistogramChild
    schedule_delay: HistogramChild
    output_tokens: Cell
    reasoning_tokens: Cell
    no_output: Cell
    inputs: Cell
    in_flight: Cell
    ok: Cell


class LiveMetrics:
    """Client-side metrics for one run: a ``RecordSink`` that serves ``/metrics``."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        pushgateway: str | None = None,
        push_job: str = "llmload",
        health_ttl_s: float = DEFAULT_HEALTH_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        max_scenarios: int = MAX_SCENARIOS,
        max_endpoints: int = MAX_ENDPOINTS,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.grace_s = grace_s
        self.pushgateway = pushgateway
        self.push_job = push_job
        self.health_ttl_s = health_ttl_s
        self._clock = clock
        self._server = MetricsServer(self.render)
        self._series: dict[Key, _Series] = {}
        self._scenarios = CappedLabel("scenario", max_scenarios)
        self._endpoints = CappedLabel("endpoint", max_endpoints)
        self._health: dict[str, tuple[HarnessHealth, float]] = {}
        self._lags: deque[tuple[float, float]] = deque()  # (seen, loop_lag_s), oldest first
        self._lock = threading.Lock()
        self._closed = False
        self.port: int | None = None
        self._define(self.registry)

    def _define(self, reg: CollectorRegistry) -> None:
        lat = LATENCY_LABELS
        self._workloads = WorkloadMetrics(reg, lat)
        self._ttft = LabelledHistogram(
            "llmload_time_to_first_token_seconds",
            "Client-side time to first content token (sync: full response), ok requests.",
            lat,
            registry=reg,
            buckets=LATENCY_BUCKETS,
        )
        self._ttfo = LabelledHistogram(
            "llmload_time_to_first_output_token_seconds",
            "Client-side time to the first answer text or tool-call piece, after any "
            "reasoning (sync: full response), ok requests.",
            lat,
            registry=reg,
            buckets=LATENCY_BUCKETS,
        )
        self._itl = LabelledHistogram(
            "llmload_inter_token_latency_seconds",
            "Client-side gaps between consecutive content events, ok requests.",
            lat,
            registry=reg,
            buckets=LATENCY_BUCKETS,
        )
        self._tpot = LabelledHistogram(
            "llmload_time_per_output_token_seconds",
            "Client-side time per output token after the first, ok requests.",
            lat,
            registry=reg,
            buckets=LATENCY_BUCKETS,
        )
        self._e2e = LabelledHistogram(
            "llmload_e2e_request_latency_seconds",
            "Client-side request start to end of body, ok requests.",
            lat,
            registry=reg,
            buckets=LATENCY_BUCKETS,
        )
        self._schedule_delay = LabelledHistogram(
            "llmload_schedule_delay_seconds",
            "Open-loop shapes: actual minus intended send time, all statuses.",
            lat,
            registry=reg,
            buckets=SCHEDULE_DELAY_BUCKETS,
        )
        self._requests = LabelledValue(
            "llmload_requests",
            "Requests the harness finished, by status (warm-up included).",
            REQUEST_LABELS,
            registry=reg,
        )
        self._output_tokens = LabelledValue(
            "llmload_output_tokens",
            "Output tokens the harness received (warm-up included).",
            lat,
            registry=reg,
        )
        self._reasoning_tokens = LabelledValue(
            "llmload_reasoning_tokens",
            "Reasoning tokens among the output tokens received (warm-up included).",
            lat,
            registry=reg,
        )
        self._no_output = LabelledValue(
            "llmload_no_output_responses",
            "Ok responses whose tokens (in usage) showed no visible output (warm-up included).",
            lat,
            registry=reg,
        )
        self._inputs = LabelledValue(
            "llmload_inputs",
            "Texts embedded or documents ranked (embeddings, rerank; warm-up included).",
            lat,
            registry=reg,
        )
        self._in_flight = LabelledValue(
            "llmload_requests_in_flight",
            "Requests handed to the HTTP client and not yet ended.",
            lat,
            kind="gauge",
            registry=reg,
        )
        self._lock_free = (
            self._ttft,
            self._ttfo,
            self._itl,
            self._tpot,
            self._e2e,
            self._schedule_delay,
            self._requests,
            self._output_tokens,
            self._reasoning_tokens,
            self._no_output,
            self._inputs,
            self._in_flight,
            *self._workloads.families,
        )
        self._users = Gauge("llmload_active_users", "Simulated users running now.", registry=reg)
        self._run_info = Info(
            "llmload_run", "The run this load generator is running (always 1).", registry=reg
        )
        cpu = Gauge(
            "llmload_client_cpu_percent",
            "CPU percent of the busiest load-generator process (100 = one core).",
            registry=reg,
        )
        cpu.set_function(lambda: self._health_max(lambda h: h.cpu_percent))
        steal = Gauge(
            "llmload_host_cpu_steal_percent",
            "Share of its host's CPU time the hypervisor gave other guests, last sample, on "
            "the load-generator host that met the most (0 on bare metal).",
            registry=reg,
        )
        steal.set_function(lambda: self._health_max(lambda h: h.steal_percent))
        lag = Gauge(
            "llmload_event_loop_lag_seconds",
            "Worst event-loop (gevent hub) lag of any load-generator process, last 5 s.",
            registry=reg,
        )
        lag.set_function(self._worst_recent_lag)
        procs = Gauge(
            "llmload_harness_processes",
            "Load-generator processes that reported health recently.",
            registry=reg,
        )
        procs.set_function(lambda: float(len(self._fresh_health())))
        # the plain prometheus_client metrics also in a registry of their own, for render()
        self._plain = CollectorRegistry(auto_describe=True)
        for metric in (self._users, self._run_info, cpu, steal, lag, procs):
            self._plain.register(metric)

    def render(self) -> bytes:
        """The ``/metrics`` body: lock-free families rendered directly, then plain metrics."""
        return "".join(f.render() for f in self._lock_free).encode() + generate_latest(self._plain)

    def describe_run(self, *, run: str, label: str, model: str, target: str) -> None:
        """Set ``llmload_run_info``: run id, label, model and the target's host:port only."""
        self._run_info.info(
            {"run": run, "label": label, "model": model, "target_host": target_host(target)}
        )

    # -- serving -------------------------------------------------------------

    def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve ``/metrics`` on ``host:port`` in the background; returns the bound port."""
        if self._server.running or self._closed:
            raise RuntimeError("exporter: start() once per run, before stop()")
        self.port = self._server.start(host, port)
        log.info("exporter: serving /metrics on %s:%d", host, self.port)
        return self.port

    def stop(self, grace_s: float | None = None) -> None:
        """End of run: push to the Pushgateway if set, let one more scrape happen, stop.

        The server keeps serving until every client that scraped it in the
        last 30 s has scraped again (a scrape that began after this call), or
        ``grace_s`` has passed — whichever comes first.  When nothing scraped
        the exporter during the run, nobody is listening and it stops at once.
        Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        ended = time.monotonic()
        if self.pushgateway:
            self.push()
        grace = self.grace_s if grace_s is None else grace_s
        if self._server.running and self._server.scrapes > 0 and grace > 0:
            if not self._server.wait_for_scrapes_after(ended, grace):
                log.warning("exporter: no scrape within %.1fs after the run ended", grace)
        self._server.stop()

    def push(self) -> bool:
        """PUT the current state to the Pushgateway (job ``push_job``); False if it failed."""
        if not self.pushgateway:
            return False
        try:
            push_to_gateway(self.pushgateway, job=self.push_job, registry=self.registry, timeout=10)
        except OSError as exc:
            log.warning("exporter: push to %s failed: %s", self.pushgateway, exc)
            return False
        return True

    @property
    def scrapes(self) -> int:
        """How many times ``/metrics`` has been scraped."""
        return self._server.scrapes

    # -- RecordSink -----------------------------------------------------------

    def _children(self, key: Key) -> _Series:
        series = self._series.get(key)
        if series is None:  # a new label set, or one folded into "other" (not cached by name)
            capped = (key[0], self._scenarios.value(key[1]), self._endpoints.value(key[2]))
            series = self._series.get(capped) or self._new_series(capped)
        return series

    def _new_series(self, key: Key) -> _Series:
        # Create every child (zeros) at a label set's first request, so the
        # first scrape sees zeros and rate()/increase() miss no observation.
        series = _Series(
            key=key,
            ttft=self._ttft.labels(*key),
            ttfo=self._ttfo.labels(*key),
            itl=self._itl.labels(*key),
            tpot=self._tpot.labels(*key),
            e2e=self._e2e.labels(*key),
            schedule_delay=self._schedule_delay.labels(*key),
            output_tokens=self._output_tokens.labels(*key),
            reasoning_tokens=self._reasoning_tokens.labels(*key),
            no_output=self._no_output.labels(*key),
            inputs=self._inputs.labels(*key),
            in_flight=self._in_flight.labels(*key),
            ok=self._requests.labels(*key, "ok"),
        )
        self._series[key] = series
        return series

    def on_request_start(self, mode: str, scenario: str, endpoint: str) -> None:
        self._children((mode, scenario, endpoint)).in_flight.inc()

    def on_record(self, record: RequestRecord) -> None:
        series = self._children((record.mode, record.scenario, record.endpoint))
        series.in_flight.dec()
        (series.ok if record.ok else self._requests.labels(*series.key, record.status)).inc()
        if record.output_tokens:
            series.output_tokens.inc(record.output_tokens)
        if record.reasoning_tokens:
            series.reasoning_tokens.inc(record.reasoning_tokens)
        if record.no_output:
            series.no_output.inc()
        if record.inputs:
            series.inputs.inc(record.inputs)
        self._workloads.observe(series.key, record)
        if record.warmup:
            return
        if record.schedule_delay_s is not None:
            series.schedule_delay.observe(max(record.schedule_delay_s, 0.0))
        if not record.ok:
            return
        if record.ttft_s is not None:
            series.ttft.observe(record.ttft_s)
        if record.ttfo_s is not None:
            series.ttfo.observe(record.ttfo_s)
        if record.e2e_s is not None:
            series.e2e.observe(record.e2e_s)
        if record.tpot_s is not None:
            series.tpot.observe(record.tpot_s)
        if record.itl_s:
            series.itl.observe_many(record.itl_s)

    def on_users(self, n: int) -> None:
        self._users.set(n)

    def on_health(self, source: str, snapshot: HarnessHealth) -> None:
        now = self._clock()
        with self._lock:
            self._health[source] = (snapshot, now)
            self._lags.append((now, snapshot.loop_lag_s))
            self._prune_lags(now)

    def watch_gpu(self, scraper: ServerScraper) -> None:
        """Export the GPU scraper's figures too (``exporter.gpu``: power, utilization, energy)."""
        self.registry.register(GpuCollector(scraper))

    def on_phase(self, name: str, mode: str, event: str, at: float) -> None:
        """Phases are marked by Grafana annotations, not metrics: label sets stay fixed."""
        return None

    def close(self) -> None:
        """``RecordSink.close``: ``stop`` with the configured grace period."""
        self.stop()

    # -- health ---------------------------------------------------------------

    def _fresh_health(self) -> list[HarnessHealth]:
        cutoff = self._clock() - self.health_ttl_s
        with self._lock:
            return [snap for snap, seen in self._health.values() if seen >= cutoff]

    def _health_max(self, field: Callable[[HarnessHealth], float]) -> float:
        return max((field(h) for h in self._fresh_health()), default=0.0)

    def _prune_lags(self, now: float) -> None:
        while self._lags and self._lags[0][0] < now - LAG_WINDOW_S:
            self._lags.popleft()

    def _worst_recent_lag(self) -> float:
        with self._lock:
            self._prune_lags(self._clock())
            return max((lag for _, lag in self._lags), default=0.0)
