"""The target's own ``/metrics`` on the run's timeline: a sampler sink, ``server_metrics.jsonl``.

``ServerScraper`` scrapes one Prometheus endpoint every ``interval_s`` in its
own greenlet (a thread when gevent has not patched the process), in the process
that owns the run's output — the local process, or a distributed run's master.
It keeps only the families it is given (``loadtests.serverfamilies`` plus any
``--server-metrics-family``), reduced by ``loadtests.run.promsample``:
gauges, counters and histogram count/sum every scrape; histogram buckets only in
*full* scrapes, taken at the start (before any load), when each phase starts
and ends (coalesced when one phase follows another), and at the end.  So a
phase's histogram deltas are exact to the phase, and the costly part of the
parse runs while no request is in flight.

``server_metrics.jsonl`` holds one JSON object a line:

* the first, ``{"meta": {...}}``: the URL (redacted), interval, the families
  asked for, the clock, and ``status`` (``scraping``, or ``absent`` with the
  reason when the endpoint did not answer with Prometheus text: then nothing
  else follows);
* one per scrape: ``t`` (``time.time()`` when the request was sent — the clock
  of ``requests.jsonl``'s ``started_at``), ``rtt_ms``, ``full`` (buckets kept),
  ``mark`` (``["end warmup", "start stream"]``: the phase events it stands
  for), and ``v``/``s``/``h`` (``promsample.Sample.to_json``); a failed scrape is
  ``{"t", "error"}``;
* the last, ``{"end": {...}}``: scrapes, failures, the parse's own CPU seconds.

The cost stays bounded: a light scrape parses a few dozen lines, a full one
yields to the users between chunks (``promsample.CHUNK_LINES``), and a slow
endpoint is never asked twice at once.  What it costs is measured in
BENCHMARKS.md ("Server metrics scrape").

The same class, a second instance, scrapes a GPU exporter into ``gpu_metrics.jsonl``
(``llmload.gpumetrics``): same clock, same phase marks, same format, with each
family also kept per GPU (``split``; ``"g"`` in a scrape's line).
"""

from __future__ import annotations

import contextlib
import json
import logging
import ssl
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from llmload.loadtests.redact import redact_url
from llmload.loadtests.run.promsample import Sample, Sampler
from llmload.loadtests.run.sinks import NullSink

log = logging.getLogger(__name__)

FILE = "server_metrics.jsonl"
CLOCK = "time.time() when the scrape was sent (requests.jsonl's started_at clock)"
#: content types of a Prometheus text exposition (0.0.4) or OpenMetrics
PROM_TYPES = ("text/plain", "application/openmetrics-text")


class NotPrometheus(Exception):
    """The endpoint did not answer with Prometheus text (the reason is the message)."""


def fetch(client: httpx.Client, url: str) -> str:
    """The exposition text at ``url``; ``NotPrometheus`` says why there is none."""
    try:
        resp = client.get(url, headers={"Accept": "text/plain"})
    except httpx.HTTPError as exc:
        raise NotPrometheus(f"{type(exc).__name__}: {exc}") from None
    if resp.status_code != 200:
        raise NotPrometheus(f"it answered HTTP {resp.status_code}")
    kind = resp.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in PROM_TYPES:
        raise NotPrometheus(f"it answered {kind or 'no content type'}, not Prometheus text")
    return resp.text


class ServerScraper(NullSink):
    """Scrapes ``url`` into ``out_dir/server_metrics.jsonl`` (see the module docstring)."""

    def __init__(
        self,
        url: str,
        out_dir: Path,
        names: Iterable[str],
        *,
        interval_s: float = 1.0,
        headers: Mapping[str, str] | None = None,
        auth: httpx.Auth | None = None,
        verify: bool | str | ssl.SSLContext = True,
        file: str = FILE,
        split: Sequence[str] = (),
        what: str = "server metrics",
    ) -> None:
        self.url = url
        self.path = Path(out_dir) / file
        self.sampler = Sampler(names, split)
        #: what the log lines call it (``server metrics``, ``GPU metrics``)
        self.what = what
        self.interval_s = interval_s
        timeout = max(1.0, min(5.0, interval_s))
        self.client = httpx.Client(
            headers=dict(headers or {}), auth=auth, verify=verify, timeout=timeout
        )
        self.samples: list[tuple[float, Sample]] = []
        self.scrapes = 0
        self.failures = 0
        self.parse_cpu_s = 0.0
        self.last_error = ""
        self._marks: list[str] = []
        self._want_full = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._file: Any = None
        self._pending: list[dict[str, Any]] = []  # lines written before the file is opened
        self._lock = threading.Lock()

    # -- set-up -------------------------------------------------------------------------
    def meta(self, status: str, reason: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {
            "url": redact_url(self.url),
            "interval_s": self.interval_s,
            "families": sorted(self.sampler.names),
            "clock": CLOCK,
            "status": status,
        }
        if reason:
            out["reason"] = reason
        return out

    def probe(self) -> str:
        """One full scrape now (the baseline, before any load): '' when the endpoint answers
        with Prometheus text, else why not (then ``absent`` is what ``start`` records)."""
        try:
            self._scrape(full=True, raise_absent=True)
        except NotPrometheus as exc:
            return str(exc)
        except ValueError as exc:  # prometheus_client.parser: not the text format
            return f"its body is not Prometheus text ({exc})"
        return ""

    #: the first write that failed (then nothing more is written), None while all is well
    write_error: str | None = None

    def start(self, absent: str = "") -> None:
        """Open the file (meta line, the probe's scrape) and start scraping; with ``absent``
        (the probe's reason) write only the meta line saying so."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w", encoding="utf-8")
        except OSError as exc:
            self.write_error = f"{self.path} ({exc.strerror or exc})"
            log.warning("%s: cannot write %s", self.what, self.write_error)
        self._line({"meta": self.meta("absent" if absent else "scraping", absent)})
        if absent:
            self._close_file()
            self.client.close()
            return
        pending, self._pending = self._pending, []
        for line in pending:
            self._line(line)
        self._thread = threading.Thread(target=self._run, name="llmload-scrape", daemon=True)
        self._thread.start()

    # -- sink ---------------------------------------------------------------------------
    def on_phase(self, name: str, mode: str, event: str, at: float) -> None:
        with self._lock:
            self._marks.append(f"{event} {name}")
            self._want_full = True
        self._wake.set()

    def close(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        self._wake.set()
        thread.join(max(5.0, 2 * self.interval_s))
        with self._lock:
            self._marks.append("close")
        self._scrape(full=True)  # the run is over: the last word on every histogram
        self._line(
            {
                "end": {
                    "scrapes": self.scrapes,
                    "failed": self.failures,
                    "parse_cpu_s": round(self.parse_cpu_s, 6),
                    "last_error": self.last_error,
                }
            }
        )
        self._close_file()
        self.client.close()

    # -- scraping -----------------------------------------------------------------------
    def _run(self) -> None:
        next_at = time.monotonic() + self.interval_s
        while not self._stop.is_set():
            self._wake.wait(max(0.0, next_at - time.monotonic()))
            self._wake.clear()
            if self._stop.is_set():
                break
            with self._lock:
                full = self._want_full
            if not full and time.monotonic() < next_at:
                continue
            try:
                self._scrape(full=full)
            except Exception:  # a scrape must never end the run
                log.exception("%s: scrape failed", self.what)
            # after a slow scrape, the next one comes an interval later (no burst of catch-ups)
            next_at = max(next_at + self.interval_s, time.monotonic()) if not full else next_at

    def _scrape(self, full: bool, raise_absent: bool = False) -> None:
        with self._lock:
            marks, self._marks = self._marks, []
            self._want_full = False
        sent = time.time()
        began = time.perf_counter()
        try:
            text = fetch(self.client, self.url)
        except NotPrometheus as exc:
            if raise_absent:
                raise
            self.failures += 1
            self.last_error = str(exc)
            self._line({"t": sent, "error": str(exc), **({"mark": marks} if marks else {})})
            return
        rtt_ms = (time.perf_counter() - began) * 1000
        cpu = [time.process_time()]

        def pause() -> None:  # between chunks: the users read their streams
            self.parse_cpu_s += time.process_time() - cpu[0]
            time.sleep(0)
            cpu[0] = time.process_time()

        pause()
        sample = self.sampler.sample(text, full, pause)
        self.parse_cpu_s += time.process_time() - cpu[0]
        self.scrapes += 1
        self.samples.append((sent, sample))
        line: dict[str, Any] = {"t": sent, "rtt_ms": round(rtt_ms, 3), "full": full}
        if marks:
            line["mark"] = marks
        self._line({**line, **sample.to_json()})

    def _line(self, obj: dict[str, Any]) -> None:
        if self.write_error is not None:
            return  # the file could not take a line: the scrape goes on, unwritten
        if self._file is None:  # the probe's scrape comes before the file is opened
            self._pending.append(obj)
            return
        try:
            self._file.write(json.dumps(obj, separators=(",", ":")) + "\n")
            self._file.flush()
        except OSError as exc:
            # the run's disk is full or gone: one line, not a traceback per scrape; the
            # lines before it are whole (each was flushed on its own)
            self.write_error = f"{self.path} ({exc.strerror or exc})"
            log.warning("%s: stopped writing %s", self.what, self.write_error)
            self._close_file()

    def _close_file(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
