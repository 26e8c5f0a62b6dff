"""The GPU exporter's figures as llmload's own gauges: power, utilization, energy since the start.

``LiveMetrics.watch_gpu(scraper)`` registers a ``GpuCollector`` reading the GPU
scraper's samples (``llmload.gpumetrics``; the families are
``loadtests.gpufamilies``) each time ``/metrics`` is read or pushed:

* ``llmload_gpu_power_watts{gpu}`` and ``llmload_gpu_utilization_percent{gpu}``:
  the latest scrape;
* ``llmload_gpu_energy_joules_total{gpu}``: the energy since the run's first
  GPU scrape — the exporter's energy counter's increase (a counter that goes
  down restarted: what it shows after counts), or its power integrated where it
  has no counter.

So a Pushgateway or a Prometheus that never saw the GPU exporter still gets the
run's GPU energy, with the run's own labels beside it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmload.loadtests import gpufamilies
from llmload.loadtests.run.scrape import ServerScraper


class GpuCollector(Collector):
    """llmload's GPU gauges from one GPU scraper (see the module docstring)."""

    def __init__(self, scraper: ServerScraper) -> None:
        self.scraper = scraper
        self._seen = 0
        self._joules: dict[str, float] = {}
        self._prev: dict[str, tuple[float, float | None, float | None]] = {}  # t, counter, W
        self._lock = threading.Lock()

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, CounterMetricFamily]:
        return (
            GaugeMetricFamily(
                "llmload_gpu_power_watts", "GPU power draw, latest scrape", labels=["gpu"]
            ),
            GaugeMetricFamily(
                "llmload_gpu_utilization_percent", "GPU utilization, latest scrape", labels=["gpu"]
            ),
            CounterMetricFamily(
                "llmload_gpu_energy_joules", "GPU energy since the run began", labels=["gpu"]
            ),
        )

    def collect(self) -> Iterator[Metric]:
        power, util, energy = self._families()
        samples = list(self.scraper.samples)  # a copy: the scraper appends from its thread
        exp = gpufamilies.detect(samples[-1][1].names()) if samples else None
        if exp is None:
            yield from (power, util, energy)
            return
        have = samples[-1][1].names()
        fams = {r: next((f for f in exp.for_role(r) if f.name in have), None) for r in ROLES}
        with self._lock:
            for t, sample in samples[self._seen :]:
                self._add(t, sample, fams)
            self._seen = len(samples)
            joules = dict(self._joules)
        last = samples[-1][1]
        for family, role in ((power, "power"), (util, "util")):
            f = fams[role]
            if f is None:
                continue
            for gpu, value in sorted(last.per.get(f.name, {}).items()):
                family.add_metric([gpu], value * f.scale)
        for gpu, value in sorted(joules.items()):
            energy.add_metric([gpu], value)
        yield from (power, util, energy)

    def _add(self, t: float, sample: Any, fams: dict[str, gpufamilies.GpuFamily | None]) -> None:
        counter, power = fams["energy"], fams["power"]
        gpus = {g for per in sample.per.values() for g in per}
        for gpu in gpus:
            c = sample.per.get(counter.name, {}).get(gpu) if counter else None
            w = sample.per.get(power.name, {}).get(gpu) if power else None
            c = None if c is None or counter is None else c * counter.scale
            w = None if w is None or power is None else w * power.scale
            before = self._prev.get(gpu)
            self._joules.setdefault(gpu, 0.0)
            if before is not None:
                t0, c0, w0 = before
                if c is not None and c0 is not None:
                    self._joules[gpu] += c if c < c0 else c - c0  # a reset: counts from zero
                elif w is not None and w0 is not None:
                    self._joules[gpu] += (t - t0) * (w + w0) / 2
            self._prev[gpu] = (t, c, w)


ROLES = ("power", "util", "energy")
