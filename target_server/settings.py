"""Server settings: one frozen dataclass, built from flags and ``LLMLOAD_*`` env vars.

Every field is a command-line flag (``max_concurrency`` -> ``--max-concurrency``)
and an environment variable (``LLMLOAD_MAX_CONCURRENCY``); a flag beats the
environment, the environment beats the default.  Engine factories receive the
whole object: ``ENGINES[settings.engine](settings)``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

ENV_PREFIX = "LLMLOAD_"
#: request bodies above this are answered 413 (checked on Content-Length and on the bytes read)
MAX_BODY_BYTES = 4 * 1024 * 1024


def _flag(help: str, default: Any, choices: Sequence[str] | None = None, **kw: Any) -> Any:
    """A dataclass field that is also a CLI flag."""
    return field(default=default, metadata={"help": help, "choices": choices}, **kw)


@dataclass(frozen=True)
class Settings:
    """The parsed server configuration (read-only once built)."""

    # server
    engine: str = _flag(
        "text generator", choices=("synthetic", "transformers"), default="synthetic"
    )
    host: str = _flag("bind address", default="127.0.0.1")
    port: int = _flag("TCP port; 0 picks a free one (the real one is logged)", default=8000)
    model_name: str | None = _flag(
        "model id served in /v1/models and accepted in requests (default: the engine's)",
        default=None,
    )
    max_concurrency: int = _flag(
        "requests generating at once; beyond it they wait (0 = unlimited)", default=0
    )
    max_queue: int = _flag("requests allowed to wait for a slot; beyond it 429", default=1024)
    request_timeout: float = _flag(
        "seconds from arrival until a request is abandoned (0 = none)", default=0.0
    )
    send_timeout: float = _flag(
        "seconds a client may read nothing while a response waits on it; then the "
        "connection is dropped (0 = never)",
        default=30.0,
    )
    client_header_timeout: float = _flag(
        "seconds a client has to send a whole request head (from its connection, or from "
        "its first byte on a kept-alive one); then 408, or closed if it sent nothing "
        "(0 = never; nginx's client_header_timeout)",
        default=60.0,
    )
    client_body_timeout: float = _flag(
        "seconds a client may send nothing while its request body is still due; then 408 "
        "and closed (0 = never; nginx's client_body_timeout)",
        default=60.0,
    )
    api_key: str | None = _flag(
        "require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on /v1/* "
        "(prefer env LLMLOAD_API_KEY)",
        default=None,
        repr=False,
    )
    max_output_tokens: int = _flag("largest max_tokens accepted", default=4096)
    max_context: int = _flag(
        "context length in tokens (0 = the engine's; synthetic: 32768)", default=0
    )
    ui: str = _flag("mount a browser UI at /ui", choices=("none", "gradio"), default="none")
    loop: str = _flag(
        "event loop for uvicorn", choices=("auto", "asyncio", "uvloop"), default="auto"
    )
    log_level: str = _flag(
        "logging level", choices=("debug", "info", "warning", "error"), default="info"
    )
    seed: int = _flag("seed for every random choice the server makes", default=0)
    workers: int = _flag(
        "server processes sharing the port (SO_REUSEPORT), each with its own event loop, "
        "engine and /metrics counters",
        default=1,
    )
    # transformers engine (target_server.model)
    model: str | None = _flag("local checkpoint directory (default: the embedded model)", None)
    device: str = _flag("torch device", choices=("auto", "cpu", "cuda"), default="auto")
    dtype: str = _flag(
        "torch dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto"
    )
    quantization: str = _flag("weights quantization", choices=("none", "bnb-4bit"), default="none")
    batching: str = _flag(
        "transformers scheduling", choices=("none", "continuous"), default="continuous"
    )
    engine_process: str = _flag(
        "continuous batching: run the decode loop in its own process (on: the server "
        "process keeps only the tokenizer, like vLLM's engine core) or on a thread of the "
        "server process (off: one process, for debugging and comparison)",
        choices=("on", "off"),
        default="on",
    )
    prefill_budget: int = _flag(
        "continuous batching: prompt tokens prefilled per turn, a long prompt in chunks "
        "between decode steps (0 = 512 on CPU, 4096 on CUDA; vLLM's "
        "--max-num-batched-tokens): lower, a long prompt waits more turns for its first "
        "token and the running streams wait less",
        default=0,
    )
    generation_config: str | None = _flag("JSON file with GenerationConfig defaults", None)
    # synthetic engine
    ttft_ms: float = _flag("synthetic: time to first token, ms", default=100.0)
    prefill_ms_per_token: float = _flag(
        "synthetic: extra TTFT per prompt token not served from the prefix cache, ms", 0.0
    )
    prefix_cache_blocks: int = _flag(
        "synthetic: prefix cache size in blocks, LRU (0 = no prefix cache)", default=0
    )
    block_size: int = _flag("synthetic: tokens per prefix-cache block", default=16)
    embedding_dim: int = _flag("synthetic: dimensions of an /v1/embeddings vector", default=384)
    itl_ms: float = _flag("synthetic: inter-token latency, ms", default=20.0)
    jitter_ms: float = _flag("synthetic: uniform +-jitter on every token time, ms", 0.0)
    itl_growth_ms: float = _flag("synthetic: extra ITL per other running request, ms", 0.0)
    itl_spread: float = _flag(
        "synthetic: each request decodes at a speed of its own: its ITL times a seeded "
        "uniform factor in [1 - x, 1 + x] (0 <= x < 1)",
        0.0,
    )
    fail_rate: float = _flag("synthetic: fraction answered HTTP 500 before streaming", 0.0)
    disconnect_rate: float = _flag("synthetic: fraction whose connection drops mid-stream", 0.0)
    stall_rate: float = _flag("synthetic: fraction that stop sending mid-stream", 0.0)
    stall_s: float = _flag("synthetic: length of a stall, s", default=30.0)
    malformed_rate: float = _flag("synthetic: fraction with one broken SSE line", 0.0)
    reasoning_tokens: int = _flag(
        "synthetic: chat answers begin with this many reasoning tokens "
        "(delta.reasoning_content, counted in usage.completion_tokens_details)",
        default=0,
    )
    tool_call_rate: float = _flag(
        "synthetic: fraction of chat requests carrying tools answered with a streamed "
        "tool call (tool_choice none: never; required or a named function: always)",
        default=1.0,
    )
    empty_rate: float = _flag(
        "synthetic: fraction answered with no visible output (tokens in usage, no text)", 0.0
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            choices = f.metadata.get("choices")
            if choices and getattr(self, f.name) not in choices:
                raise ValueError(f"{f.name}={getattr(self, f.name)!r}: choose from {choices}")
        rates = ("fail_rate", "disconnect_rate", "stall_rate", "malformed_rate")
        for name in (*rates, "tool_call_rate", "empty_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1]")
        if not 0.0 <= self.itl_spread < 1.0:
            raise ValueError("itl_spread must be within [0, 1)")
        if self.embedding_dim < 1:
            raise ValueError("embedding_dim must be >= 1")
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.reasoning_tokens < 0:
            raise ValueError("reasoning_tokens must be >= 0")
        if self.prefix_cache_blocks < 0 or self.block_size < 1:
            raise ValueError("prefix_cache_blocks must be >= 0 and block_size >= 1")
        if self.client_header_timeout < 0 or self.client_body_timeout < 0:
            raise ValueError("client_header_timeout/client_body_timeout must be >= 0")
        if self.prefill_budget < 0:
            raise ValueError("prefill_budget must be >= 0")
        if self.max_concurrency < 0 or self.max_queue < 0 or self.max_output_tokens < 1:
            raise ValueError("max_concurrency/max_queue must be >= 0, max_output_tokens >= 1")

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with some fields replaced (validated again)."""
        return replace(self, **overrides)


def _converter(f: Any) -> Any:
    default = f.default if f.default is not MISSING else None
    if isinstance(default, bool):
        return lambda s: s.lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int
    if isinstance(default, float):
        return float
    return str


def build_parser(env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The ``python -m llmload.target_server`` parser; defaults come from ``env`` (os.environ)."""
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(
        prog="llmload serve",
        description="llmload's bundled OpenAI-compatible streaming server.",
        epilog=f"Every flag can also be set as an environment variable {ENV_PREFIX}<FLAG>.",
    )
    for f in fields(Settings):
        conv = _converter(f)
        env_name = ENV_PREFIX + f.name.upper()
        default = f.default
        if env_name in env and env[env_name] != "":
            default = conv(env[env_name])
        shown = "(set)" if f.name == "api_key" and default else default
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=conv,
            default=default,
            choices=f.metadata.get("choices"),
            help=f"{f.metadata['help']} [env {env_name}; default {shown}]",
        )
    return parser


def parse_settings(
    argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
) -> Settings:
    """Flags, then env, then defaults -> a validated ``Settings``."""
    parser = build_parser(env)
    ns = parser.parse_args(argv)
    try:
        return Settings(**vars(ns))
    except ValueError as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits
