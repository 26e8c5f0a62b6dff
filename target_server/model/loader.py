"""Loading a causal LM and its tokenizer: the embedded model or a local checkpoint."""

from __future__ import annotations

import importlib.util
import inspect
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from llmload.target_server.model.embedded import embedded_model_dir

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelLoadError(RuntimeError):
    """The model cannot be loaded as configured (the server exits with this message)."""


@dataclass
class LoadedModel:
    """A model ready to run, with what the startup log and the engines need."""

    model: Any
    tokenizer: Any
    name: str
    source: str
    embedded: bool
    device: torch.device
    dtype: torch.dtype
    quantization: str
    params: int
    max_context: int
    eos_ids: list[int]
    load_s: float
    #: ``"cache"`` (transformers >= 5.24) or ``"past_key_values"``
    cache_kwarg: str
    #: torch intra-op threads (CPU)
    threads: int = 0
    #: the model's own generation defaults (``model.generation_config``)
    generation_config: Any = None

    def __post_init__(self) -> None:
        if self.generation_config is None and self.model is not None:
            self.generation_config = self.model.generation_config

    def describe(self) -> str:
        """One line for the startup log."""
        kind = "embedded (random weights: output is gibberish)" if self.embedded else "checkpoint"
        return (
            f"{self.name} [{kind}] from {self.source}: {self.params / 1e6:.1f} M params, "
            f"device {self.device}, dtype {str(self.dtype).removeprefix('torch.')}, "
            f"quantization {self.quantization}, context {self.max_context}, "
            f"torch threads {self.threads}, "
            f"loaded in {self.load_s:.2f}s"
        )


def resolve_device(device: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; ``cuda`` without CUDA is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("--device cuda: torch sees no CUDA device (torch.cuda.is_available())")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto`` -> bfloat16 on CUDA (float16 if unsupported), float32 on CPU."""
    if dtype != "auto":
        return DTYPES[dtype]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def configure_threads(device: torch.device) -> int:
    """Torch intra-op threads: ``$LLMLOAD_TORCH_THREADS``, else 1 on a CPU with <= 4 cores.

    On a small shared CPU, two OpenMP threads spin-waiting for each other made a
    decode step 3-8x slower whenever another process was busy (see README).
    """
    env = os.environ.get("LLMLOAD_TORCH_THREADS")
    if env:
        torch.set_num_threads(int(env))
    elif device.type == "cpu" and (os.cpu_count() or 1) <= 4:
        torch.set_num_threads(1)
    return int(torch.get_num_threads())


def load(settings: Any) -> LoadedModel:
    """Load the model named by ``settings.model`` (None: build/reuse the embedded one)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    embedded = not settings.model
    path = embedded_model_dir() if embedded else Path(settings.model).expanduser()
    if not (path / "config.json").exists():
        raise ModelLoadError(f"--model {path}: not a Hugging Face model directory (no config.json)")
    device = resolve_device(settings.device)
    dtype = resolve_dtype(settings.dtype, device)
    kwargs: dict[str, Any] = {"dtype": dtype}
    if settings.quantization == "bnb-4bit":
        kwargs.update(_bnb_4bit(device, dtype))
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model: Any = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError, ImportError) as exc:
        raise ModelLoadError(f"cannot load {path}: {exc}") from exc
    if settings.quantization != "bnb-4bit":
        model.to(device)
    model.eval()
    if tokenizer.chat_template is None:
        log.warning("%s has no chat template: chat requests use a plain role: content layout", path)
    eos = model.generation_config.eos_token_id
    eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos_ids:
        eos_ids.append(tokenizer.eos_token_id)
    config_ctx = int(getattr(model.config, "max_position_embeddings", 0) or 0) or 4096
    max_context = settings.max_context or config_ctx
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=_model_name(path, embedded),
        source=str(path),
        embedded=embedded,
        device=device,
        dtype=dtype,
        quantization=settings.quantization,
        params=sum(p.numel() for p in model.parameters()),
        max_context=max_context,
        eos_ids=eos_ids,
        load_s=time.perf_counter() - t0,
        cache_kwarg=cache_kwarg(model),
        threads=configure_threads(device),
    )


def cache_kwarg(model: Any) -> str:
    """The forward's cache argument: ``cache`` (transformers >= 5.24) or ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _bnb_4bit(device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """``from_pretrained`` arguments for the seeds' 4-bit NF4 path; clear errors otherwise."""
    if device.type != "cuda":
        raise ModelLoadError("--quantization bnb-4bit needs a CUDA device (bitsandbytes 4-bit)")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ModelLoadError("--quantization bnb-4bit needs bitsandbytes: pip install bitsandbytes")
    from transformers import BitsAndBytesConfig

    quant = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype
    )
    return {"quantization_config": quant, "device_map": {"": device.index or 0}}


def _model_name(path: Path, embedded: bool) -> str:
    if embedded:
        meta = json.loads((path / "llmload.json").read_text())
        return str(meta["name"])
    return path.resolve().name
