"""A host's GPUs read through NVML, written as dcgm-exporter writes them.

``exposition`` reads NVML (``nvidia-ml-py``'s ``pynvml``; imported only here,
by ``init``) and writes its figures under dcgm-exporter's family names, units
and labels (``loadtests.gpufamilies.DCGM``): power (W), the energy counter (mJ
since the driver loaded, where the GPU has one), utilization (%), memory used
and free (MiB), SM clock (MHz), temperature (°C).  A figure the GPU does not
support is left out (the report then integrates power, saying so).  Two users,
so it lives in ``llmload.common``:

* ``--gpu-metrics nvml`` (``llmload.gpumetrics``): when the target runs on the
  load generator's own host and no dcgm-exporter runs there, ``serve()`` serves
  every GPU of this host on a loopback port, and the usual GPU scraper reads
  it on the run's clock like any exporter;
* the bundled server on CUDA (``target_server.nvmlgauges``): its own ``/metrics``
  carries the figures of the GPU(s) its model is on (``indexes``, from
  ``nvml_indexes``), which ``--gpu-metrics auto`` finds there.
"""

from __future__ import annotations

import importlib
import os
import socket
import threading
from collections.abc import Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: (family, help) in the order served; each read by ``_read``
FAMILIES = (
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy since boot (in mJ)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
)


class NvmlUnavailable(Exception):
    """NVML cannot be read here (the reason is the message)."""


def init() -> Any:
    """The ``pynvml`` module, NVML initialised; ``NvmlUnavailable`` says why not."""
    try:
        nv = importlib.import_module("pynvml")
    except ImportError:
        raise NvmlUnavailable(
            "nvidia-ml-py is not installed (pip install 'llmload[gpu]')"
        ) from None
    try:
        nv.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError: no driver, no device
        raise NvmlUnavailable(f"NVML did not start: {exc}") from None
    return nv


def _read(nv: Any, handle: Any) -> dict[str, float]:
    """One GPU's figures under the DCGM names; a figure it does not support is left out."""
    readers = {
        "DCGM_FI_DEV_POWER_USAGE": lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(
            handle
        ),
        "DCGM_FI_DEV_GPU_UTIL": lambda: nv.nvmlDeviceGetUtilizationRates(handle).gpu,
        "DCGM_FI_DEV_FB_USED": lambda: nv.nvmlDeviceGetMemoryInfo(handle).used / 2**20,
        "DCGM_FI_DEV_FB_FREE": lambda: nv.nvmlDeviceGetMemoryInfo(handle).free / 2**20,
        "DCGM_FI_DEV_SM_CLOCK": lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM),
        "DCGM_FI_DEV_GPU_TEMP": lambda: nv.nvmlDeviceGetTemperature(
            handle, nv.NVML_TEMPERATURE_GPU
        ),
    }
    out = {}
    for name, read in readers.items():
        try:
            out[name] = float(read())
        except Exception:  # pynvml.NVMLError_NotSupported and kin: this GPU has no such figure
            continue
    return out


def _text(s: Any) -> str:
    return (s.decode() if isinstance(s, bytes) else str(s)).replace("\\", "").replace('"', "")


def nvml_indexes(nv: Any, cuda_indexes: Iterable[int], visible: str | None = None) -> list[int]:
    """The NVML indexes of CUDA devices ``cuda_indexes`` (torch's ``cuda:N``), in order.

    CUDA numbers only the devices ``CUDA_VISIBLE_DEVICES`` (``visible``: default, the
    environment's) lists, in its order; an entry is an index or a GPU's UUID (or a
    unique prefix of it).  Unset, CUDA's numbers are NVML's: both count in PCI bus
    order where the GPUs are alike (on a host with unlike GPUs CUDA counts the fastest
    first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``).  A device that cannot be told (a
    MIG instance, an index past the list) is left out.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    count = nv.nvmlDeviceGetCount()
    entries = None if visible is None else [e.strip() for e in visible.split(",")]
    out: list[int] = []
    for cuda in cuda_indexes:
        if entries is None:
            found: int | None = cuda
        elif cuda >= len(entries):
            found = None
        elif entries[cuda].isdigit():
            found = int(entries[cuda])
        else:
            uuids = [
                _text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))) for i in range(count)
            ]
            hits = [i for i, u in enumerate(uuids) if entries[cuda] and u.startswith(entries[cuda])]
            found = hits[0] if len(hits) == 1 else None
        if found is not None and 0 <= found < count and found not in out:
            out.append(found)
    return out


def exposition(nv: Any, host: str, indexes: Sequence[int] | None = None) -> str:
    """The figures of GPUs ``indexes`` (NVML's; default every GPU) as dcgm-exporter's text
    exposition."""
    gpus = []
    for i in range(nv.nvmlDeviceGetCount()) if indexes is None else indexes:
        h = nv.nvmlDeviceGetHandleByIndex(i)
        labels = (
            f'gpu="{i}",UUID="{_text(nv.nvmlDeviceGetUUID(h))}",device="nvidia{i}",'
            f'modelName="{_text(nv.nvmlDeviceGetName(h))}",Hostname="{_text(host)}"'
        )
        gpus.append((labels, _read(nv, h)))
    lines = []
    for name, kind, help_text in FAMILIES:
        rows = [f"{name}{{{labels}}} {vals[name]!r}" for labels, vals in gpus if name in vals]
        if rows:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *rows]
    return "\n".join(lines) + "\n"


def serve() -> str:
    """Start serving this host's NVML figures on a loopback port (a daemon thread, for the
    process's life); the URL.  ``NvmlUnavailable`` says why not."""
    nv = init()
    host = socket.gethostname()
    lock = threading.Lock()  # NVML calls from one thread at a time

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name
            with lock:
                body = exposition(nv, host).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            """No access log on stderr for every scrape."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="llmload-nvml", daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/metrics"
