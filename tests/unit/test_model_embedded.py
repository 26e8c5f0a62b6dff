"""The embedded model: a normal HF directory, Qwen chat format, cached, deterministic."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from llmload.target_server.model import embedded


def test_loads_like_any_checkpoint(embedded_model: Path, embedded_tokenizer: Any) -> None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(embedded_model)
    assert config.model_type == "qwen2"
    assert config.hidden_size == embedded.MODEL_DIMS["hidden_size"]
    tok = embedded_tokenizer
    assert tok.eos_token == "<|im_end|>"
    text = tok.apply_chat_template(
        [{"role": "user", "content": "你好"}], add_generation_prompt=True, tokenize=False
    )
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tok.encode(text, add_special_tokens=False)
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")
    # the corpus taught it whole words and Chinese characters, not just bytes
    assert len(tok.encode("首字延迟")) <= 4
    assert len(tok.encode(" the server")) <= 3


def test_second_call_reuses_the_cache(embedded_model: Path) -> None:
    before = (embedded_model / "model.safetensors").stat().st_mtime_ns
    assert embedded.embedded_model_dir() == embedded_model
    assert (embedded_model / "model.safetensors").stat().st_mtime_ns == before
    assert embedded_model.name.endswith(embedded.config_hash())


def test_build_is_deterministic(
    embedded_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMLOAD_CACHE", str(tmp_path))
    again = embedded.embedded_model_dir()
    assert again != embedded_model and again.parent.parent == tmp_path

    def digest(d: Path, name: str) -> str:
        return hashlib.sha256((d / name).read_bytes()).hexdigest()

    for name in ("model.safetensors", "tokenizer.json"):
        assert digest(again, name) == digest(embedded_model, name)
    leftovers = [p for p in os.listdir(again.parent) if p.startswith(".build-")]
    assert leftovers == []
