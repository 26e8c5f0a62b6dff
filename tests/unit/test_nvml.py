"""NVML figures as dcgm-exporter writes them: all GPUs or some, and the server's own GPU.

This machine has no GPU: ``pynvml`` is ``tests/fixtures/nvml_stub`` (two GPUs, GPU 0
with an energy counter, GPU 1 without), put in ``sys.modules`` for the test.  What is
under test is ours: the exposition (``llmload.common.nvml``), the CUDA-to-NVML index
mapping, and the bundled server's ``DeviceGauges`` (``target_server.nvmlgauges``).
"""

from __future__ import annotations

import logging
import sys
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmload.common import nvml
from llmload.loadtests import gpufamilies
from llmload.target_server.nvmlgauges import DeviceGauges
from tests.fixtures.nvml_stub import pynvml as stub


@pytest.fixture
def nv(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setitem(sys.modules, "pynvml", stub)
    return nvml.init()


def series(text: str) -> dict[str, dict[str, float]]:
    """family -> gpu label -> value, parsed as a Prometheus client would."""
    out: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(fam.name, {})[s.labels["gpu"]] = s.value
    return out


def test_every_gpu_by_default_and_only_the_ones_asked_for(nv: Any) -> None:
    everything = series(nvml.exposition(nv, "box"))
    assert everything["DCGM_FI_DEV_POWER_USAGE"] == {"0": 250.0, "1": 150.0}
    assert set(everything["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]) == {"0"}  # GPU 1: no counter
    only = nvml.exposition(nv, "box", [1])
    got = series(only)
    assert {g for per in got.values() for g in per} == {"1"}
    assert got["DCGM_FI_DEV_GPU_TEMP"] == {"1": 61.0}
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" not in got
    assert 'Hostname="box"' in only and 'UUID="GPU-stub-1"' in only
    assert gpufamilies.detect(got) is gpufamilies.DCGM
    assert nvml.exposition(nv, "box", []) == "\n"  # nothing asked, nothing written


@pytest.mark.parametrize(
    ("visible", "cuda", "expected"),
    [
        (None, [0], [0]),  # unset: CUDA's numbers are NVML's
        (None, [1], [1]),
        (None, [5], []),  # no such GPU
        ("1", [0], [1]),  # cuda:0 is the second GPU
        ("1,0", [0, 1], [1, 0]),
        ("GPU-stub-1", [0], [1]),  # by UUID
        ("GPU-stub", [0], []),  # a prefix of both: not told
        ("MIG-abc", [0], []),  # a MIG instance: not one whole GPU
        ("0", [1], []),  # past the list
        ("", [0], []),  # no device visible
    ],
)
def test_cuda_indexes_map_to_nvml_through_cuda_visible_devices(
    nv: Any, visible: str | None, cuda: list[int], expected: list[int]
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        if visible is None:
            mp.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            mp.setenv("CUDA_VISIBLE_DEVICES", visible)
        assert nvml.nvml_indexes(nv, cuda) == expected


def test_the_server_reads_only_its_engines_gpu(
    monkeypatch: pytest.MonkeyPatch, nv: Any, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    engine = SimpleNamespace(cuda_devices=lambda: [0])
    with caplog.at_level(logging.INFO, "llmload.target_server"):
        gauges = DeviceGauges.open(engine)
    assert gauges is not None and gauges.indexes == [1]
    got = series(gauges.render().decode())
    assert got["DCGM_FI_DEV_POWER_USAGE"] == {"1": 150.0}
    assert [r.getMessage() for r in caplog.records] == [
        "GPU figures: NVML GPU 1 (cuda:0) on /metrics, as dcgm-exporter's families"
    ]


@pytest.mark.parametrize(
    "engine",
    [object(), SimpleNamespace(cuda_devices=lambda: [])],
    ids=["no cuda_devices (synthetic)", "on the CPU"],
)
def test_an_engine_without_a_cuda_device_adds_nothing_and_says_nothing(
    engine: object, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("NVML asked for an engine without a GPU")

    monkeypatch.setattr(nvml, "init", refuse)
    with caplog.at_level(logging.INFO, "llmload.target_server"):
        assert DeviceGauges.open(engine) is None
    assert caplog.records == []


def test_without_nvml_one_line_and_no_gauges(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    with caplog.at_level(logging.INFO, "llmload.target_server"):
        assert DeviceGauges.open(SimpleNamespace(cuda_devices=lambda: [0])) is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("GPU figures: none on /metrics for cuda:0 (nvidia-ml-py is not")


def test_a_failing_read_is_an_empty_part_logged_once(
    monkeypatch: pytest.MonkeyPatch, nv: Any, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gauges = DeviceGauges.open(SimpleNamespace(cuda_devices=lambda: [0]))
    assert gauges is not None

    def lost(i: int) -> None:
        raise stub.NVMLError("GPU is lost")

    monkeypatch.setattr(stub, "nvmlDeviceGetHandleByIndex", lost)
    with caplog.at_level(logging.WARNING, "llmload.target_server"):
        assert gauges.render() == b"" and gauges.render() == b""
    assert len(caplog.records) == 1 and "GPU is lost" in caplog.records[0].getMessage()
