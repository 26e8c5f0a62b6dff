"""Read ``server_metrics.jsonl`` or ``gpu_metrics.jsonl`` (``loadtests.run.scrape``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmload.loadtests import serverfamilies
from llmload.loadtests.run.promsample import Sample, read_sample
from llmload.loadtests.run.scrape import FILE


@dataclass(frozen=True)
class Scrape:
    """One scrape: when it was sent (``time.time()``), its families, the phase events it marks."""

    t: float
    sample: Sample
    full: bool = False
    marks: tuple[str, ...] = ()
    rtt_ms: float | None = None


@dataclass
class ServerRun:
    """What the scraper wrote: its meta line, the scrapes in order, failures, the end line."""

    meta: dict[str, Any]
    scrapes: list[Scrape] = field(default_factory=list)
    failed: list[tuple[float, str]] = field(default_factory=list)
    end: dict[str, Any] = field(default_factory=dict)
    corrupt_lines: int = 0

    @property
    def status(self) -> str:
        return str(self.meta.get("status") or "unknown")

    def names(self) -> set[str]:
        """Every family any scrape held."""
        return {n for s in self.scrapes for n in s.sample.names()}

    def server(self) -> serverfamilies.Server | None:
        """The known server whose families these are (None: none llmload knows)."""
        return serverfamilies.detect(self.names())

    def full(self) -> list[Scrape]:
        return [s for s in self.scrapes if s.full]

    def between(self, t0: float, t1: float) -> list[Scrape]:
        """The scrapes sent within ``[t0, t1]``."""
        return [s for s in self.scrapes if t0 <= s.t <= t1]


#: the GPU exporter's scrapes (``llmload.gpumetrics``): the same format, per GPU too
GPU_FILE = "gpu_metrics.jsonl"


def read_server_run(run_dir: Path | str, file: str = FILE) -> ServerRun | None:
    """The run's ``server_metrics.jsonl`` (or ``file``: ``GPU_FILE``), or None when the run
    has none (an older run, or ``--server-metrics off``)."""
    path = Path(run_dir) / file
    if not path.is_file():
        return None
    out = ServerRun(meta={})
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                if not isinstance(d, dict):
                    raise ValueError("not an object")
                _add(out, d)
            except (ValueError, TypeError, KeyError):
                out.corrupt_lines += 1
    out.scrapes.sort(key=lambda s: s.t)
    return out


def _add(out: ServerRun, d: dict[str, Any]) -> None:
    if "meta" in d:
        out.meta = dict(d["meta"])
    elif "end" in d:
        out.end = dict(d["end"])
    elif "error" in d:
        out.failed.append((float(d["t"]), str(d["error"])))
    else:
        rtt = d.get("rtt_ms")
        out.scrapes.append(
            Scrape(
                float(d["t"]),
                read_sample(d),
                bool(d.get("full")),
                tuple(str(m) for m in d.get("mark") or ()),
                None if rtt is None else float(rtt),
            )
        )
