"""The GPU exporters' Prometheus families that llmload knows, by role, and how to read them.

One catalogue for the GPU scraper (``llmload.gpumetrics``: which families to
keep, which labels name a GPU) and the report (``reports.server.gpu``: what
each family means, its unit).  Like ``loadtests.serverfamilies``, a counter is
named without ``_total`` and each family has a ``role``, so the report reads
"the power draw" whichever exporter it came from.  ``scale`` turns the
exporter's unit into the report's (J, W, MiB, MHz, °C, %, a 0..1 share).

The names, units and labels come from each exporter's documentation
(``source``); ``tests/fixtures/metrics/gpu/dcgm.txt`` and ``amd.txt`` are
recorded-shape expositions that pin them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: what a family says about a GPU (in the report's unit), and how a phase sums it up
ROLES = {
    "util": "GPU utilization, % (mean)",
    "mem_used": "device memory used, MiB (max)",
    "mem_free": "device memory free, MiB (min)",
    "power": "power draw, W (mean and max)",
    "energy": "energy counter, J (its increase over the phase)",
    "sm_clock": "SM (graphics) clock, MHz (mean)",
    "temp": "GPU temperature, °C (max)",
    "gr_active": "graphics engine active, 0..1 (mean; a profiling field)",
    "sm_active": "SMs active, 0..1 (mean; a profiling field)",
    "dram_active": "DRAM active, 0..1 (mean; a profiling field)",
}
KINDS = ("gauge", "counter")


@dataclass(frozen=True)
class GpuFamily:
    """One family of a GPU exporter: name, type, role, and the factor to the report's unit."""

    name: str
    kind: str
    role: str
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.role not in ROLES or self.kind not in KINDS:
            raise ValueError(f"{self.name}: unknown role {self.role!r} or kind {self.kind!r}")


@dataclass(frozen=True)
class Exporter:
    """A GPU exporter: its families, the labels that name one GPU, its usual port."""

    key: str
    name: str
    families: tuple[GpuFamily, ...]
    #: the labels whose values, joined with ``/``, name one GPU (host first)
    id_labels: tuple[str, ...]
    port: int
    source: str

    def names(self) -> list[str]:
        return [f.name for f in self.families]

    def for_role(self, role: str) -> list[GpuFamily]:
        """The families that play ``role``, in preference order."""
        return [f for f in self.families if f.role == role]


def _g(name: str, role: str, scale: float = 1.0) -> GpuFamily:
    return GpuFamily(name, "gauge", role, scale)


DCGM = Exporter(
    "dcgm",
    "NVIDIA dcgm-exporter",
    (
        _g("DCGM_FI_DEV_GPU_UTIL", "util"),
        _g("DCGM_FI_DEV_FB_USED", "mem_used"),
        _g("DCGM_FI_DEV_FB_FREE", "mem_free"),
        _g("DCGM_FI_DEV_POWER_USAGE", "power"),
        # mJ since the driver loaded; dcgm-exporter declares it a counter
        GpuFamily("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "energy", 1e-3),
        _g("DCGM_FI_DEV_SM_CLOCK", "sm_clock"),
        _g("DCGM_FI_DEV_GPU_TEMP", "temp"),
        _g("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gr_active"),
        _g("DCGM_FI_PROF_SM_ACTIVE", "sm_active"),
        _g("DCGM_FI_PROF_DRAM_ACTIVE", "dram_active"),
    ),
    ("Hostname", "gpu"),
    9400,
    "NVIDIA/dcgm-exporter: etc/default-counters.csv (units from DCGM's field reference)",
)

AMD = Exporter(
    "amd",
    "AMD device metrics exporter",
    (
        _g("gpu_gfx_activity", "util"),
        _g("gpu_used_vram", "mem_used"),
        _g("gpu_free_vram", "mem_free"),
        _g("gpu_package_power", "power"),
        _g("gpu_power_usage", "power"),
        # µJ accumulated by the device
        GpuFamily("gpu_energy_consumed", "counter", "energy", 1e-6),
        _g("gpu_junction_temperature", "temp"),
        _g("gpu_edge_temperature", "temp"),
    ),
    ("hostname", "gpu_id"),
    5000,
    "ROCm/device-metrics-exporter: docs (metrics list: GPU_PACKAGE_POWER, GPU_ENERGY_CONSUMED ...)",
)

EXPORTERS: tuple[Exporter, ...] = (DCGM, AMD)
#: every label that names a GPU, host labels first (the scraper keys a series by these)
ID_LABELS: tuple[str, ...] = ("Hostname", "hostname", "gpu", "gpu_id")


def known_names() -> list[str]:
    """Every family name of every known exporter."""
    return [n for e in EXPORTERS for n in e.names()]


def detect(present: Iterable[str]) -> Exporter | None:
    """The known exporter most of whose families are ``present`` (None: none of them)."""
    have = set(present)
    best, exporter = max(
        ((sum(n in have for n in e.names()), e) for e in EXPORTERS), key=lambda x: x[0]
    )
    return exporter if best else None
