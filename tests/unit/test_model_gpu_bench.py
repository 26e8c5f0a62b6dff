"""bench/gpu.py without a GPU: it refuses clearly; its arithmetic and table are right."""

from __future__ import annotations

import pytest
import torch

from bench import gpu


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
