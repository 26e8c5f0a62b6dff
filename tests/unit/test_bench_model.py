"""bench/model.py without servers: the 'before' tree and the section it writes."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from bench import model


def test_the_baseline_tree_is_the_engine_before_the_lean_path(tmp_path: Path) -> None:
    have = subprocess.run(
        ["git", "cat-file", "-e", f"{model.BASELINE}^{{commit}}"],
        cwd=model.ROOT,
        capture_output=True,
    )
    if have.returncode != 0:
        pytest.skip(f"commit {model.BASELINE} is not in this checkout (a shallow clone)")
    tree = model.baseline_tree(model.BASELINE, tmp_path)
    embedded = (tree / "target_server" / "model" / "embedded.py").read_text()
    assert '"hidden_size": 384' in embedded and '"num_hidden_layers": 6' in embedded
    assert "class PaddedBatch" in (tree / "target_server" / "model" / "kvbatch.py").read_text()


def test_render_states_the_ratios_and_the_goals() -> None:
    args = argparse.Namespace(
        users=20,
        tokens=64,
        single_tokens=128,
        repeats=3,
        duration="20s",
        warmup="10s",
        baseline=model.BASELINE,
    )
    phase = {
        "count": 30,
        "slo_met_rate": 0.97,
        "ttft_ms": {"p50": 150.0, "p95": 400.0},
        "tpot_ms": {"p50": 8.0},
        "e2e_ms": {"p50": 900.0, "p95": 2000.0},
        "output_tokens_per_s": 800.0,
    }
    summary = {"phases": {"sync": dict(phase), "stream": dict(phase)}, "slo": "ttft=600ms"}
    rows = {
        "before": {
            "single_tps": 50.0,
            "agg_tps": 300.0,
            "agg_ttft": [1.0, 2.0],
            "summary": summary,
            "cores": 0.9,
            "busy": None,
        },
        "now": {
            "single_tps": 400.0,
            "agg_tps": 900.0,
            "agg_ttft": [0.1, 0.2],
            "summary": summary,
            "cores": 0.3,
            "busy": 0.25,
        },
    }
    text = model.render(args, rows, {1: 0.001, 20: 0.003}, "calibration: x", 0.5, 10.0)
    assert "single stream **8.0×** (goal ≥ 4×: met)" in text
    assert "20 streams **3.0×** (goal ≥ 4×: **not met**)" in text
    assert "calibration: x" in text and "| now | stream | 30 | 97% |" in text
    head = model.headline(args, rows, "calibration: x")
    assert "**400 tokens/s** (8.0× the engine before" in head and "97% of streamed" in head
