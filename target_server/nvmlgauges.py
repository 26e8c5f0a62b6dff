"""The engine's own GPU(s) on the server's ``/metrics``, as NVIDIA dcgm-exporter names them.

Once the engine is ready, ``DeviceGauges.open(engine)`` asks it which CUDA devices
its model is on (the optional ``cuda_devices()`` of ``target_server.engine``: the
transformers engines on CUDA; the synthetic engine and a model on the CPU have
none, and nothing changes for them).  When NVML can be read (``nvidia-ml-py``'s
``pynvml``), every scrape of ``/metrics`` then ends with those GPUs' figures —
only theirs, by NVML index — written by ``llmload.common.nvml.exposition``, the
same families, units and labels as ``--gpu-metrics nvml`` serves, so a run's GPU
scraper reads them (``--gpu-metrics auto`` looks there when nothing answers on
dcgm-exporter's port).  When NVML is missing or does not start, one line says so
at start and ``/metrics`` is what it was; a scrape whose NVML read fails is
answered without the GPU part (its first failure logged), never with a 500.

A scrape reads about seven NVML figures per GPU (a few ms in all): the handler
runs them on a worker thread, off the event loop, one scrape at a time (a lock,
as ``nvml.serve`` has).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

from llmload.common import nvml

log = logging.getLogger("llmload.target_server")


class DeviceGauges:
    """NVML figures of the GPUs ``indexes`` (NVML's numbering) for ``/metrics``."""

    def __init__(self, nv: Any, indexes: list[int], host: str | None = None):
        self.nv = nv
        self.indexes = indexes
        self.host = host or socket.gethostname()
        self._lock = threading.Lock()
        self._failed = False

    @classmethod
    def open(cls, engine: object) -> DeviceGauges | None:
        """The gauges of the engine's CUDA devices, or None (no CUDA device, or no NVML:
        then one line says why)."""
        ask = getattr(engine, "cuda_devices", None)
        cuda = list(ask()) if ask is not None else []
        if not cuda:
            return None
        where = ", ".join(f"cuda:{i}" for i in cuda)
        try:
            nv = nvml.init()
            indexes = nvml.nvml_indexes(nv, cuda)
        except nvml.NvmlUnavailable as exc:
            log.warning("GPU figures: none on /metrics for %s (%s)", where, exc)
            return None
        except Exception as exc:  # pynvml.NVMLError: the count or a UUID could not be read
            log.warning("GPU figures: none on /metrics for %s (NVML: %s)", where, exc)
            return None
        if not indexes:
            log.warning(
                "GPU figures: none on /metrics (%s is no GPU NVML can name: "
                "CUDA_VISIBLE_DEVICES=%s)",
                where,
                os.environ.get("CUDA_VISIBLE_DEVICES"),
            )
            return None
        log.info(
            "GPU figures: NVML GPU %s (%s) on /metrics, as dcgm-exporter's families",
            ",".join(map(str, indexes)),
            where,
        )
        return cls(nv, indexes)

    def render(self) -> bytes:
        """The GPUs' exposition text ('' when NVML could not be read this time)."""
        with self._lock:
            try:
                return nvml.exposition(self.nv, self.host, self.indexes).encode()
            except Exception as exc:  # a GPU lost, a driver gone: /metrics answers regardless
                if not self._failed:
                    log.warning("GPU figures: NVML read failed (%s); /metrics goes on without", exc)
                self._failed = True
                return b""
