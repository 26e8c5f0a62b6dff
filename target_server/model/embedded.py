"""The embedded default model: a tiny Qwen2 with seeded random weights, built on first use.

No model hub is reachable where llmload runs, so the default model is made here:
a byte-level BPE tokenizer trained on the bundled ``corpus.txt`` (English,
Chinese, code) with Qwen's special tokens and chat template, and a
``Qwen2ForCausalLM`` whose weights come from a fixed seed.  Its output is
gibberish by design; its cost per token is that of a real (small) transformer.

The result is a normal Hugging Face directory (``config.json``,
``model.safetensors``, ``tokenizer.json``, ``chat_template.jinja``, ...), cached
under ``$LLMLOAD_CACHE/models/<hash>/`` (default ``~/.cache/llmload``) and
written atomically (temp dir + rename), so parallel processes may race safely.
The recipe (dimensions, seed, template) and the tokenizer are
``llmload.common.embedded``'s, which the load generator reads too.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from llmload.common.embedded import (
    CHAT_TEMPLATE,
    MODEL_DIMS,
    MODEL_NAME,
    SEED,
    cache_root,
    config_hash,
    train_tokenizer,
)

log = logging.getLogger(__name__)


def embedded_model_dir() -> Path:
    """Return the embedded model's directory, building it first if it is not cached."""
    final = cache_root() / "models" / f"{MODEL_NAME}-{config_hash()}"
    if (final / "config.json").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            # another process finished first (rename onto a non-empty dir fails)
            if not (final / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("built embedded model %s in %.1fs", final, time.perf_counter() - t0)
    return final


def build_tokenizer() -> Any:
    """Train the byte-level BPE tokenizer on the bundled corpus (a ``PreTrainedTokenizerFast``)."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
        model_max_length=MODEL_DIMS["max_position_embeddings"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build(out: Path) -> None:
    """Write tokenizer, config, seeded weights and generation config into ``out``."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(out)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        bos_token_id=eot,
        eos_token_id=im_end,
        pad_token_id=eot,
        dtype="float32",
        **MODEL_DIMS,
    )
    torch.manual_seed(SEED)
    model = Qwen2ForCausalLM(config).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=eot,
        eos_token_id=[im_end, eot],
        pad_token_id=eot,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
    )
    model.save_pretrained(out)
    (out / "llmload.json").write_text(
        json.dumps({"name": MODEL_NAME, "hash": config_hash(), "seed": SEED}, indent=1) + "\n"
    )
