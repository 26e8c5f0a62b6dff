"""Opt-in (``make test-gpu``): NVML on a real GPU: the server's ``/metrics``, bench.gpu's energy.

Needs a CUDA device and ``nvidia-ml-py`` (``pip install 'llmload[gpu]'``); skipped
otherwise.  The CPU machines test the same code with a stand-in ``pynvml``
(``tests/unit/test_nvml.py``, ``tests/unit/test_model_gpu_bench.py``,
``tests/integration/test_gpu_metrics_run.py``).
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(
        importlib.util.find_spec("pynvml") is None, reason="needs nvidia-ml-py (llmload[gpu])"
    ),
]


def nvml_index_of_cuda0() -> int:
    from llmload.common import nvml

    (index,) = nvml.nvml_indexes(nvml.init(), [0])
    return index


@pytest.mark.parametrize("engine_process", ["off", "on"])
def test_the_servers_metrics_carry_its_gpus_nvml_figures(
    embedded_model: Path, start_server: Any, engine_process: str
) -> None:
    from llmload.target_server.settings import Settings

    settings = Settings(
        engine="transformers", device="cuda", batching="continuous", engine_process=engine_process
    )
    server = start_server(settings=settings)
    assert server.engine.cuda_devices() == [0]
    text = httpx.get(server.url + "/metrics", timeout=30).text
    gpus: dict[str, set[str]] = {}
    values: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if fam.name.startswith("DCGM_FI_DEV_"):
                gpus.setdefault(fam.name, set()).add(s.labels["gpu"])
                values[fam.name] = s.value
    index = str(nvml_index_of_cuda0())
    assert gpus["DCGM_FI_DEV_POWER_USAGE"] == {index}  # this GPU only, whatever the host has
    assert all(g == {index} for g in gpus.values())
    assert 1 < values["DCGM_FI_DEV_POWER_USAGE"] < 3000  # W
    # the model's weights and cache are on it
    assert values["DCGM_FI_DEV_FB_USED"] > 0


def test_bench_gpu_meters_energy_on_this_gpu() -> None:
    from bench import gpu

    make, where = gpu.energy_meter(torch.cuda.current_device())
    assert make is not None, where
    x = torch.randn(4096, 4096, device="cuda")
    with make() as e:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 2.0:
            x = torch.tanh(x @ x)
        torch.cuda.synchronize()
    assert e.source in (gpu.COUNTER, gpu.INTEGRATED)
    figures = e.figures(1000)
    assert e.seconds == pytest.approx(2.0, abs=0.5)
    assert 10 < figures["watts"] < 3000, (figures, os.environ.get("CUDA_VISIBLE_DEVICES"))
