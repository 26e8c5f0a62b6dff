"""Engine odds and ends: GPU gauges (CUDA mocked), factory selection, EOS masking."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import GenerationConfig

from llmload.target_server.engine import ENGINES, GenerationRequest
from llmload.target_server.model import genconfig
from llmload.target_server.model.sampling import penalty_processors
from llmload.target_server.settings import Settings


def test_factory_picks_the_engine_by_batching() -> None:
    import llmload.target_server.model  # noqa: F401  (registers "transformers")

    none = ENGINES["transformers"](Settings(engine="transformers", batching="none"))
    cont = ENGINES["transformers"](Settings(engine="transformers", batching="continuous"))
    off = Settings(engine="transformers", batching="continuous", engine_process="off")
    names = [type(e).__name__ for e in (none, cont, ENGINES["transformers"](off))]
    assert names == ["ThreadedEngine", "ProcessEngine", "BatchedEngine"]
    assert cont.extra_metrics() == none.extra_metrics()  # gauges read 0 before the start
    assert not none.ready and none.running() == 0
    assert none.extra_metrics() == {
        "engine_busy_ratio": 0.0,
        "engine_queue_depth": 0.0,
        "engine_batch_size": 0.0,
    }
    assert none.model_name == "llmload-tiny-qwen2"


def test_gpu_memory_gauges(monkeypatch: pytest.MonkeyPatch) -> None:
    # no GPU here: torch.cuda's two counters are mocked, the engine's code path is real
    from llmload.target_server.model.threaded import ThreadedEngine

    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda dev=None: 16 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda dev=None: 17 * 2**30)
    engine = ThreadedEngine(Settings(engine="transformers", batching="none"))
    engine.lm = SimpleNamespace(device=torch.device("cuda", 0))  # type: ignore[assignment]  # a stand-in object for the test
    gauges = engine.extra_metrics()
    assert gauges["gpu_memory_allocated_bytes"] == float(16 * 2**30)
    assert gauges["gpu_memory_reserved_bytes"] == float(17 * 2**30)


def test_busy_meter_reports_the_busy_share_of_its_window() -> None:
    from llmload.target_server.model.base import BusyMeter

    meter = BusyMeter(window_s=10.0, mark_every_s=0.5)
    t0 = meter._marks[0][0]
    for k in range(20):  # 20 s of 0.25 s busy in every second
        meter.begin(t0 + k)
        meter.end(t0 + k + 0.25)
    assert meter.busy_s(t0 + 20) == pytest.approx(5.0)
    assert meter.ratio(t0 + 20) == pytest.approx(0.25, abs=0.03)
    meter.begin(t0 + 20)  # work in progress counts
    assert meter.ratio(t0 + 30) > 0.9
    meter.end(t0 + 30)
    assert meter.ratio(t0 + 60) < 0.35  # idle since: the share decays


def test_min_tokens_masks_eos_until_reached() -> None:
    base = GenerationConfig(do_sample=False, eos_token_id=[2])
    req = GenerationRequest("r", None, "x", max_tokens=8, min_tokens=2)
    gc, pen, _ = genconfig.resolve(base, {}, req)
    procs = penalty_processors(gc, pen, prompt_len=3, eos_ids=[2])
    scores = torch.zeros((1, 5))
    for generated, masked in ((0, True), (1, True), (2, False)):
        ids = torch.ones((1, 3 + generated), dtype=torch.long)
        out = procs(ids, scores.clone())
        assert bool(out[0, 2] == float("-inf")) is masked


def test_prefill_groups_keep_padding_bounded() -> None:
    from llmload.target_server.model.batched import prefill_groups

    rows = [SimpleNamespace(plan=SimpleNamespace(ids=[0] * n)) for n in (3000, 20, 25, 30, 2900)]
    groups = [[len(r.plan.ids) for r in g] for g in prefill_groups(rows)]
    assert groups == [[20, 25, 30], [2900, 3000]]
    for g in groups:
        assert max(g) * len(g) <= 1.25 * sum(g)
    assert prefill_groups([]) == []
    # a short prompt is never padded to a long one's length
    pair = [SimpleNamespace(plan=SimpleNamespace(ids=[0] * n)) for n in (1500, 30)]
    assert [len(g) for g in prefill_groups(pair)] == [1, 1]


def test_chunked_prefill_gives_the_same_tokens_and_can_be_cancelled(embedded_model: object) -> None:
    import asyncio

    from llmload.target_server.model.batched import BatchedEngine

    engine = BatchedEngine(Settings(engine="transformers", batching="continuous"))
    prompts = ["short", "a longer prompt about time to first token " * 6, "mid " * 20]

    async def texts_of(eng: BatchedEngine) -> list[str]:
        async def one(i: int, prompt: str) -> str:
            req = GenerationRequest(f"c{i}", None, prompt, 12, ignore_eos=True, seed=i)
            return "".join([p.text async for p in eng.generate(eng.prepare(req))])

        return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts))))

    async def texts() -> list[str]:
        return await texts_of(engine)

    async def scenario() -> tuple[list[str], list[str], int]:
        await engine.start()
        try:
            whole = await texts()
            engine.prefill_budget = 8  # a few tokens per turn: every prompt takes several turns
            chunked = await texts()
            long_req = GenerationRequest("long", None, "token " * 400, 4, seed=1)
            task = asyncio.create_task(_drain(engine.generate(engine.prepare(long_req))))
            while not engine._core or not engine._core.prefills:
                await asyncio.sleep(0.001)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return whole, chunked, engine.running()
        finally:
            await engine.stop()

    whole, chunked, running = asyncio.run(scenario())
    assert chunked == whole
    # --prefill-budget states the same from the command line (the engine child reads it too)
    stated = BatchedEngine(Settings(engine="transformers", batching="continuous", prefill_budget=8))

    async def stated_texts() -> tuple[int, list[str]]:
        await stated.start()
        try:
            return stated.prefill_budget, await texts_of(stated)
        finally:
            await stated.stop()

    budget, again = asyncio.run(stated_texts())
    assert budget == 8 and again == whole
    assert running == 0 and engine._core is not None and engine._core.prefills == []


async def _drain(gen: object) -> None:
    async for _ in gen:  # type: ignore[attr-defined]  # an attribute the stubs do not declare
        pass


@pytest.mark.parametrize("batching", ["none", "continuous"])
def test_cancelled_twice_still_counts_the_request_out(
    embedded_model: object, batching: str
) -> None:
    import asyncio

    from llmload.target_server.model import build

    engine = build(Settings(engine="transformers", batching=batching))

    async def scenario() -> int:
        await engine.start()
        try:
            first = asyncio.Event()

            async def consume() -> None:
                req = GenerationRequest("twice", None, "hello", 500, ignore_eos=True)
                async for _ in engine.generate(engine.prepare(req)):
                    first.set()

            task = asyncio.create_task(consume())
            await first.wait()
            task.cancel()
            await asyncio.sleep(0)  # the generator is now in its cleanup, waiting for the engine
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(500):
                if engine.running() == 0:
                    break
                await asyncio.sleep(0.01)
            return engine.running()
        finally:
            await engine.stop()

    assert asyncio.run(scenario()) == 0
