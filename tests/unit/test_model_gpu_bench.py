"""bench/gpu.py without a GPU: it refuses clearly; its arithmetic and table are right.

Energy: this machine has no GPU, so NVML is ``tests/fixtures/nvml_stub``'s ``pynvml``
(GPU 0 draws 250 W and has an energy counter; GPU 1 draws 150 W and has none), put in
``sys.modules`` for the test; the counter's difference, the power integration, the
per-token figures and the table are bench.gpu's own code.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from bench import gpu
from llmload.common import nvml
from tests.fixtures.nvml_stub import pynvml as stub


def test_without_cuda_it_measures_nothing_and_says_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # this machine has no GPU; the patch only makes the test independent of that
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu.main(["--no-write"]) == 2
    err = capsys.readouterr().err
    assert "no CUDA device" in err and "make bench-gpu" in err


def test_bandwidth_table_and_bound() -> None:
    assert gpu.bandwidth_for("NVIDIA H200") == 4800
    assert gpu.bandwidth_for("NVIDIA H100 80GB HBM3") == 3350
    assert gpu.bandwidth_for("NVIDIA A100-SXM4-80GB") == 2039
    assert gpu.bandwidth_for("Some Future GPU") is None
    # 15.2 GB of bf16 weights at 4.8 TB/s: at most ~316 batch-1 tokens/s
    assert gpu.decode_bound_tps(15.2e9, 4800) == pytest.approx(315.8, rel=1e-3)


def test_dimensions_are_qwen25_7b() -> None:
    from transformers import Qwen2Config

    config = Qwen2Config(**gpu.QWEN25_7B)
    h, i, layers, v = config.hidden_size, config.intermediate_size, 28, config.vocab_size
    kv = config.num_key_value_heads * (h // config.num_attention_heads)
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * i + (h + 2 * kv)  # q,o + k,v + mlp + biases
    params = layers * per_layer + 2 * v * h  # + embeddings and untied lm_head
    assert params / 1e9 == pytest.approx(7.6, abs=0.05)  # "7.61B" on the model card


def test_the_whole_script_runs_on_a_toy_model(
    embedded_model: object, capsys: pytest.CaptureFixture[str]
) -> None:
    # no GPU here: the same pipeline (model build, both engines, render) on a 2-layer model
    assert gpu.main(["--cpu-smoke", "--prompt", "64", "--tokens", "6", "--streams", "3"]) == 0
    out = capsys.readouterr().out
    assert "| continuous |" in out and "| none |" in out
    assert "Continuous / none aggregate at 3 streams" in out


@pytest.fixture
def nv(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setitem(sys.modules, "pynvml", stub)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return nvml.init()


def test_integrate_is_the_trapezoid_rule() -> None:
    assert gpu.integrate([]) == 0 and gpu.integrate([(0.0, 100.0)]) == 0
    # 100 W for 1 s, then a ramp to 300 W over 2 s: 100 + 400 J
    assert gpu.integrate([(0.0, 100.0), (1.0, 100.0), (3.0, 300.0)]) == pytest.approx(500.0)


def test_energy_from_the_counter_before_and_after(nv: Any) -> None:
    with gpu.Energy(nv, nv.nvmlDeviceGetHandleByIndex(0)) as e:
        time.sleep(0.3)
    assert e.source == gpu.COUNTER and e.samples == []  # no thread, no sampling
    # the stub's counter is 250 W since import, read on its own clock: within a few ms
    assert e.joules == pytest.approx(250.0 * e.seconds, abs=250.0 * 0.01)
    f = e.figures(600)
    assert f["j_per_token"] == pytest.approx(e.joules / 600)
    assert f["tokens_per_j"] == pytest.approx(600 / e.joules)
    assert f["watts"] == pytest.approx(250.0, rel=0.05)


def test_energy_integrates_power_where_there_is_no_counter(nv: Any) -> None:
    with gpu.Energy(nv, nv.nvmlDeviceGetHandleByIndex(1), period_s=0.05) as e:
        time.sleep(0.3)
    assert e.source == gpu.INTEGRATED
    assert len(e.samples) >= 4  # entry, ~5 on the thread, exit
    assert e.joules == pytest.approx(150.0 * e.seconds)  # a constant draw: exact
    assert e.figures(0)["j_per_token"] is None and e.figures(0)["watts"] == pytest.approx(150.0)


def test_energy_meter_says_why_not(monkeypatch: pytest.MonkeyPatch, nv: Any) -> None:
    make, where = gpu.energy_meter(0)
    assert make is not None and where == "NVML GPU 0" and make().handle == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    make, where = gpu.energy_meter(0)
    assert make is not None and where == "NVML GPU 1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-x")
    assert gpu.energy_meter(0) == (None, "cuda:0 is no GPU NVML can name")
    monkeypatch.setitem(sys.modules, "pynvml", None)
    make, where = gpu.energy_meter(0)
    assert make is None and "nvidia-ml-py is not installed" in where


def test_the_engines_blocks_are_metered_and_tabled(
    embedded_model: Path, nv: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``measure`` on the toy model (CPU) with GPU 1's meter (the stub's power, integrated):
    each block's tokens are what the engine generated, its energy 150 W over its time."""
    args = argparse.Namespace(prompt=64, tokens=6, streams=3)
    lm = gpu.loaded_model(gpu.build_model("cpu", gpu.SMOKE_DIMS))
    meter = lambda: gpu.Energy(nv, 1, period_s=0.02)  # noqa: E731  # a factory, as energy_meter's
    results = {b: asyncio.run(gpu.measure(b, lm, args, meter)) for b in ("continuous", "none")}
    for r in results.values():
        single, streams = r["energy"]["single"], r["energy"]["streams"]
        assert single["tokens"] == 3 * 6 and streams["tokens"] == 3 * 6
        for block in (single, streams):
            assert block["source"] == gpu.INTEGRATED
            assert block["joules"] == pytest.approx(150.0 * block["seconds"])
            assert block["j_per_token"] == pytest.approx(block["joules"] / 18)
    text = gpu.render("cpu", 1.0, 1.0, lm.params, 1.0, 0.0, results, args, "NVML GPU 1")
    lines = text.splitlines()
    assert any(x.startswith("Energy (NVML GPU 1; power sampled every 100 ms") for x in lines)
    rows = [x for x in lines if x.startswith("| continuous | 3 concurrent streams | 18 |")]
    assert len(rows) == 1 and rows[0].endswith("| 150 |")
    assert "| none | single stream (3 × 64-token prompt + 6 tokens) | 18 |" in text


def test_without_nvml_the_table_says_why() -> None:
    args = argparse.Namespace(prompt=64, tokens=6, streams=3)
    r = {"ttft": 0.1, "tps": 10.0, "agg": 30.0, "ttft_p50_many": 0.2, "mem": 0.0}
    text = gpu.render("x", 1.0, 1.0, 10, 1.0, 0.0, {"none": r}, args, "NVML did not start: x")
    assert text.splitlines()[-1] == "Energy: not measured (NVML did not start: x)."
