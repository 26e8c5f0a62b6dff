"""Opt-in (``make test-gpu``): both transformers engines on a CUDA device, embedded model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from llmload.target_server.engine import GenerationRequest
from llmload.target_server.model import build
from llmload.target_server.settings import Settings

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize(
    ("batching", "engine_process"), [("none", "on"), ("continuous", "on"), ("continuous", "off")]
)
def test_engine_runs_on_cuda_and_reports_memory(
    embedded_model: Path, batching: str, engine_process: str
) -> None:
    # continuous + on: the model and its CUDA memory live in the engine process, and the
    # gauges below come from what it publishes
    settings = Settings(
        engine="transformers", batching=batching, device="cuda", engine_process=engine_process
    )
    engine = build(settings)

    async def scenario() -> list[int]:
        await engine.start()
        try:
            assert engine.lm is not None and engine.lm.device.type == "cuda"
            assert engine.lm.dtype == torch.bfloat16

            async def one(seed: int) -> int:
                req = GenerationRequest(f"g{seed}", None, "hello", 16, ignore_eos=True, seed=seed)
                return len([p async for p in engine.generate(engine.prepare(req))])

            return list(await asyncio.gather(*(one(s) for s in range(4))))
        finally:
            gauges = engine.extra_metrics()
            await engine.stop()
            assert gauges["gpu_memory_allocated_bytes"] > 0
            # the cache is not emptied after requests: reserved stays at least allocated
            assert gauges["gpu_memory_reserved_bytes"] >= gauges["gpu_memory_allocated_bytes"]

    assert asyncio.run(scenario()) == [16] * 4


def test_bench_gpu_bandwidth_table_knows_this_device() -> None:
    from bench.gpu import bandwidth_for

    name = torch.cuda.get_device_name()
    assert bandwidth_for(name) is not None, f"add {name!r} to bench.gpu.BANDWIDTH_GBS"
