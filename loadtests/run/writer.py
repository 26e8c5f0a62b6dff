"""The run writer: a ``RecordSink`` that writes ``requests.jsonl`` and ``run.json``.

``requests.jsonl`` gets one ``RequestRecord.to_json()`` line per record,
flushed as it is written, so a killed run keeps what it measured (compressed,
``--records-compression``: ``requests.jsonl.gz``/``.zst``, flushed every second;
``loadtests.recordfile``).  ``run.json``
is written when the run opens (``status: "running"``) and rewritten atomically
on every phase change and at ``close()`` with the final status and count.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.recordfile import RecordFile
from llmload.loadtests.run.healthlog import HealthLog
from llmload.loadtests.run.sinks import HarnessHealth, NullSink

SCHEMA = 1
RUN_STATUSES = ("running", "completed", "interrupted", "failed")
#: freed when the disk fills, so that run.json and the report still have room
RESERVE_BYTES = 256 * 1024
RESERVE_NAME = ".llmload-reserve"


@dataclass(frozen=True)
class WriteFailure:
    """The run's own files could not be written: what, after how many records, where."""

    path: str
    error: str
    records: int
    whole_bytes: int

    def sentence(self) -> str:
        """One line for the terminal."""
        return (
            f"the load generator could not write {self.path} ({self.error}) after "
            f"{self.records} records; the file ends with its last whole record "
            f"(line {self.records}, byte {self.whole_bytes}); the run stopped"
        )

    def to_json(self) -> dict[str, Any]:
        return {"class": "output", **asdict(self)}


def versions() -> dict[str, str]:
    """Versions of the pieces that shape a measurement."""
    out = {"python": platform.python_version()}
    for dist, key in (
        ("llmload", "llmload"),
        ("locust", "locust"),
        ("httpx", "httpx"),
        ("gevent", "gevent"),
        ("httpcore", "httpcore"),
    ):
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[key] = "not installed"
    return out


def host_info() -> dict[str, Any]:
    """The load generator's machine."""
    return {
        "hostname": socket.gethostname(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
    }


class RunWriter(NullSink):
    """Writes one run directory; ``info`` is ``run.json`` less phases, times, status, count."""

    def __init__(self, out_dir: Path, info: dict[str, Any], compression: str = "none") -> None:
        self.out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self.run_path = out_dir / "run.json"
        #: the first write that failed (no space, quota, I/O error, a read-only remount)
        self.failure: WriteFailure | None = None
        #: called once with that failure (the runner stops the run)
        self.on_failure: Callable[[WriteFailure], None] | None = None
        #: run.json could not be written (the terminal says so)
        self.run_json_error: str | None = None
        self._reserve = out_dir / RESERVE_NAME
        with contextlib.suppress(OSError):  # room for run.json and the report at the end
            self._reserve.write_bytes(b"\0" * RESERVE_BYTES)
        # a directory reused for a new run starts over: records of two runs never mix
        self._file = RecordFile(out_dir, compression)
        self.requests_path = self._file.path
        self.records = 0
        self.status = "running"
        self.phases: list[dict[str, Any]] = []
        self._info = {"schema": SCHEMA, **info}
        self._info.setdefault("versions", versions())
        self._info.setdefault("host", host_info())
        self.started_at = time.time()
        self.ended_at: float | None = None
        self._closed = False
        self.health = HealthLog()
        self._write_run_json()

    def on_record(self, record: RequestRecord) -> None:
        if self.failure is not None:
            return  # the run is stopping; records after the failure have nowhere to go
        try:
            self._file.write(record.to_json())
        except OSError as exc:
            self._failed(self._file.path, exc)
            return
        self.records += 1

    def _failed(self, path: Path, exc: OSError) -> None:
        """The first failed write: keep the file whole, free the reserve, stop the run."""
        self._file.cut_back()
        self._file.abandon()
        self._release_reserve()
        self.failure = WriteFailure(
            str(path), exc.strerror or str(exc), self.records, self._file.whole_bytes
        )
        self.status = "failed"
        if self.on_failure is not None:
            self.on_failure(self.failure)

    def _release_reserve(self) -> None:
        with contextlib.suppress(OSError):
            self._reserve.unlink()

    def on_health(self, source: str, snapshot: HarnessHealth) -> None:
        self.health.add(source, snapshot)

    def on_phase(self, name: str, mode: str, event: str, at: float) -> None:
        if event == "start":
            self.phases.append({"name": name, "mode": mode, "started_at": at, "ended_at": None})
            self.health.begin(name)
        elif event == "end":
            for phase in reversed(self.phases):
                if phase["name"] == name and phase["ended_at"] is None:
                    phase["ended_at"] = at
                    health = self.health.end(name)
                    if health is not None and health["processes"]:
                        phase["health"] = health
                    break
        self._write_run_json()

    def update(self, **fields: Any) -> None:
        """Add or replace top-level ``run.json`` fields (e.g. the detected model)."""
        self._info.update(fields)
        self._write_run_json()

    def set_status(self, status: str) -> None:
        """The run's outcome: ``completed``, ``interrupted`` or ``failed`` (a failed write
        has the last word: the run failed, whatever else happened)."""
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}")
        self.status = "failed" if self.failure is not None else status

    def run_json(self) -> dict[str, Any]:
        """The current ``run.json`` content."""
        out = {
            **self._info,
            "phases": self.phases,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "status": self.status,
            "records": self.records,
        }
        if self.failure is not None:
            out["failure"] = self.failure.to_json()
        return out

    def _write_run_json(self) -> None:
        """Replace run.json atomically; a failure is remembered (and stops the run), the
        previous run.json stays whole."""
        tmp = self.run_path.with_suffix(".json.tmp")
        try:
            tmp.write_text(
                json.dumps(self.run_json(), indent=2, ensure_ascii=False, default=str) + "\n",
                encoding="utf-8",
            )
            os.replace(tmp, self.run_path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            self.run_json_error = f"{self.run_path} ({exc.strerror or exc})"
            if self.failure is None:
                self._failed(self.run_path, exc)
        else:
            self.run_json_error = None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.failure is None:
            try:
                self._file.close()
            except OSError as exc:  # the last bytes of a compressed stream
                self._failed(self._file.path, exc)
        self._release_reserve()
        self.ended_at = time.time()
        now = self.ended_at
        for phase in self.phases:
            if phase["ended_at"] is None:
                phase["ended_at"] = now
        if self.status == "running":
            self.status = "completed"
        self._write_run_json()
