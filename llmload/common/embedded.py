"""The embedded model's recipe and its tokenizer: what the server and the load generator share.

The bundled server builds the embedded default model from this recipe
(``llmload.target_server.model.embedded``: torch and transformers); the load
generator counts and makes exact-length prompts with the same tokenizer on a slim
install (``tokenizer_file``: only the ``tokenizers`` package).  Both ends read the
one recipe here, below both, so neither imports the other.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

#: bump when the build procedure changes, so old caches are not reused
BUILD_VERSION = 1
MODEL_NAME = "llmload-tiny-qwen2"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 2048
SEED = 20240607

#: Qwen2-Instruct's chat template (default system prompt when none is given)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

#: Qwen2 dimensions, sized for the job: the default load (20 users, one request every
#: 3 s, up to ~134 tokens each on the ``mix`` scenario) must stay well inside one core of
#: a slow 2-core machine beside the load generator.  A decode step of a model this small
#: is mostly the forward's fixed per-layer cost, so layers are what cost: 1 layer x 256
#: (1.2 M parameters) took ~1.5 ms of CPU per step at 8 rows where 2 layers took 2.2 and
#: the 6 x 384 model before it 12.7 (docs/engines.md; that one saturated at the seeds'
#: load on a slow machine).
MODEL_DIMS: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    # wider than Qwen's 0.02 so the logits are peaked enough that sampling
    # parameters (temperature, top_p) visibly change the output
    "initializer_range": 0.08,
}


def corpus_text() -> str:
    """The bundled tokenizer-training corpus."""
    return resources.files(__package__).joinpath("corpus.txt").read_text(encoding="utf-8")


def cache_root() -> Path:
    """``$LLMLOAD_CACHE`` or ``~/.cache/llmload``."""
    env = os.environ.get("LLMLOAD_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "llmload"


def config_hash() -> str:
    """A short hash of everything that determines the built files."""
    spec = {
        "version": BUILD_VERSION,
        "dims": MODEL_DIMS,
        "vocab": VOCAB_SIZE,
        "seed": SEED,
        "special": SPECIAL_TOKENS,
        "template": CHAT_TEMPLATE,
        "corpus": hashlib.sha256(corpus_text().encode()).hexdigest(),
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def train_tokenizer() -> Any:
    """Train the byte-level BPE tokenizer on the bundled corpus (a ``tokenizers.Tokenizer``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = corpus_text().splitlines(keepends=True)
    tok.train_from_iterator(lines, trainer=trainer)
    return tok


def tokenizer_file() -> Path:
    """The embedded model's ``tokenizer.json``, without torch or transformers.

    The built model's own file when it is cached; else the tokenizer alone is
    trained (a few seconds, deterministic: the same merges as the model's) and
    cached under ``$LLMLOAD_CACHE/tokenizers/``.  The load generator uses it to
    build exact-length prompts (``--dataset random``) on a slim install.
    """
    name = f"{MODEL_NAME}-{config_hash()}"
    built = cache_root() / "models" / name / "tokenizer.json"
    if built.exists():
        return built
    alone = cache_root() / "tokenizers" / f"{name}.json"
    if not alone.exists():
        alone.parent.mkdir(parents=True, exist_ok=True)
        tmp = alone.with_name(f".{alone.name}.{os.getpid()}.tmp")
        train_tokenizer().save(str(tmp))
        os.replace(tmp, alone)
    return alone
