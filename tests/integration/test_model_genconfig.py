"""--generation-config defaults, beam search, batching independence and startup errors."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmload.target_server.engine import build_engine
from llmload.target_server.serving import start_server_thread
from llmload.target_server.settings import Settings

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "How do I measure inter-token latency?"}]


def _greedy_text(model_dir: Path, tokenizer: Any, n: int) -> str:
    """The embedded model's greedy continuation, straight from ``model.generate``."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    text = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
    out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return str(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))


def test_file_defaults_apply_to_every_request_unless_overridden(
    embedded_model: Path, embedded_tokenizer: Any, tmp_path: Path
) -> None:
    greedy = _greedy_text(embedded_model, embedded_tokenizer, 30)
    # a clean two-character stop string from the middle of the greedy text (the random
    # model also emits stray bytes, shown as U+FFFD, which a stop string cannot match)
    at = next(
        i
        for i in range(8, len(greedy) - 1)
        if greedy[i : i + 2].strip()
        and "\ufffd" not in greedy[i : i + 2]
        and greedy.index(greedy[i : i + 2]) == i  # its first occurrence
    )
    stop = greedy[at : at + 2]
    path = tmp_path / "gen.json"
    path.write_text(json.dumps({"do_sample": False, "stop_strings": [stop]}))
    settings = Settings(engine="transformers", batching="continuous", generation_config=str(path))
    srv = start_server_thread(settings, log_level="warning")
    try:
        body = {"messages": MESSAGES, "max_tokens": 30, "ignore_eos": True}
        out = httpx.post(srv.url + CHAT, json=body, timeout=60).json()
        assert out["choices"][0]["message"]["content"] == greedy[: greedy.index(stop)]
        assert out["choices"][0]["finish_reason"] == "stop"
        # a request's own temperature overrides the file's do_sample=false
        sampled = httpx.post(
            srv.url + CHAT, json={**body, "temperature": 1.0, "seed": 8}, timeout=60
        ).json()
        assert not greedy.startswith(sampled["choices"][0]["message"]["content"])
    finally:
        srv.stop()


def test_beam_search_runs_on_the_thread_engine_and_is_refused_by_continuous(
    embedded_model: Path, tmp_path: Path
) -> None:
    path = tmp_path / "beams.json"
    path.write_text(json.dumps({"num_beams": 2, "do_sample": False, "no_repeat_ngram_size": 2}))
    with pytest.raises(ValueError, match="--batching none"):
        build_engine(
            Settings(engine="transformers", batching="continuous", generation_config=str(path))
        )
    settings = Settings(engine="transformers", batching="none", generation_config=str(path))
    srv = start_server_thread(settings, log_level="warning")
    try:
        body = {"messages": MESSAGES, "max_tokens": 12, "ignore_eos": True}
        out = httpx.post(srv.url + CHAT, json=body, timeout=60).json()
        assert out["usage"]["completion_tokens"] == 12
        assert out["choices"][0]["finish_reason"] == "length"
    finally:
        srv.stop()


def test_a_request_samples_the_same_alone_or_in_a_full_batch(embedded_model: Path) -> None:
    settings = Settings(engine="transformers", batching="continuous", max_concurrency=8)
    srv = start_server_thread(settings, log_level="warning")

    async def run(seeds: list[int]) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=srv.url, timeout=60) as client:
            bodies = [
                {"messages": MESSAGES, "max_tokens": 16 + s, "ignore_eos": True, "seed": s}
                for s in seeds
            ]
            rs = await asyncio.gather(*(client.post(CHAT, json=b) for b in bodies))
            return [r.json() for r in rs]

    try:
        alone = [asyncio.run(run([s]))[0] for s in (1, 5)]
        together = asyncio.run(run(list(range(8))))
    finally:
        srv.stop()
    for s, out in zip((1, 5), alone, strict=True):
        assert together[s]["choices"][0]["message"] == out["choices"][0]["message"]
    assert [o["usage"]["completion_tokens"] for o in together] == [16 + s for s in range(8)]


def test_bnb_4bit_without_cuda_is_a_clear_startup_error(embedded_model: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmload.target_server",
            "--port",
            "0",
            "--engine",
            "transformers",
            "--quantization",
            "bnb-4bit",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "bnb-4bit needs a CUDA device" in proc.stderr
