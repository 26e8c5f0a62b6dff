"""``--gpu-metrics nvml``: this host's GPUs read through NVML, served as a dcgm-exporter would.

When the target runs on the load generator's own host and no dcgm-exporter runs
there, ``serve()`` reads NVML (``nvidia-ml-py``, the ``gpu`` extra; imported
only here) and serves its figures on a loopback port under dcgm-exporter's
family names, units and labels (``loadtests.gpufamilies.DCGM``), so the usual
GPU scraper reads them on the run's clock like any exporter: power (W), the
energy counter (mJ since the driver loaded, where the GPU has one), utilization
(%), memory used and free (MiB), SM clock (MHz), temperature (°C).  A figure the
GPU does not support is left out (the report then integrates power, saying so).
"""

from __future__ import annotations

import importlib
import socket
import threading
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


def _nvml() -> Any:
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


def exposition(nv: Any, host: str) -> str:
    """Every GPU's figures as dcgm-exporter's text exposition."""
    gpus = []
    for i in range(nv.nvmlDeviceGetCount()):
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
    nv = _nvml()
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
