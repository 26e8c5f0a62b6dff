"""What both transformers engines share: loading, prompts, per-request plans, warm-up.

Imports no torch at module level: with ``--engine-process on`` the server process
starts the engine process first and imports torch (for the tokenizer and the plans'
validation) while the child imports it too, instead of one after the other.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmload.target_server.busy import BusyMeter
from llmload.target_server.engine import (
    EngineFault,
    EngineInputError,
    GenerationRequest,
    PreparedRequest,
    TokenPiece,
)
from llmload.target_server.model import embedded, genconfig
from llmload.target_server.model.textstream import TextStream

if TYPE_CHECKING:  # torch comes with the first request's plan or the model, not the import
    from transformers import GenerationConfig

    from llmload.target_server.model.loader import LoadedModel

log = logging.getLogger("llmload.target_server.model")

WARMUP_PROMPT = "Warm-up: 你好, world. def f(x): return x"
#: continuous batching: batch size when --max-concurrency is 0 (unlimited at the server)
DEFAULT_MAX_BATCH = 64
#: continuous batching: concurrent warm-up requests (a few rows, so batched steps are warm too)
WARMUP_REQUESTS = 4


@dataclass
class Plan:
    """An engine's private payload for one request."""

    ids: list[int]
    gc: GenerationConfig
    penalties: dict[str, float]
    stops: tuple[str, ...]
    seed: int
    max_new_tokens: int
    eos_ids: frozenset[int]


class PieceMaker:
    """Generated token ids -> one ``TokenPiece`` each, with the finish reason on the last."""

    def __init__(self, plan: Plan, tokenizer: Any):
        self.plan = plan
        self.text = TextStream(tokenizer, plan.stops)
        self.count = 0
        self.finished = False

    def token(self, token: int) -> TokenPiece:
        """The piece for the next generated token (call only while not ``finished``)."""
        self.count += 1
        text = self.text.push(token)
        reason = None
        if self.text.stopped:
            reason = "stop"
        elif token in self.plan.eos_ids and self.count > (self.plan.gc.min_new_tokens or 0):
            reason = "stop"
        elif self.count >= self.plan.max_new_tokens:
            reason = "length"
        if reason is not None:
            self.finished = True
            text += self.text.flush()
        return TokenPiece(text, finish_reason=reason)


class ModelEngine:
    """Shared half of ``ThreadedEngine`` and ``BatchedEngine`` (see ``target_server.engine``)."""

    name = "transformers"
    batching = "none"

    def __init__(self, settings: Any):
        self.settings = settings
        self.server_fields = genconfig.load_generation_file(settings.generation_config)
        self.lm: LoadedModel | None = None
        self.model_name: str = settings.model_name or _guess_name(settings.model)
        self.max_context: int = settings.max_context or _guess_context(settings.model)
        self.max_output_tokens: int = settings.max_output_tokens
        self._rng = random.Random(settings.seed)
        self._ready = False
        self.warmup_s = 0.0
        self.busy = BusyMeter()

    @property
    def ready(self) -> bool:
        return self._ready

    async def start(self, loaded: LoadedModel | None = None) -> None:
        """Load (off the event loop), start the backend, warm up, then report ready.

        ``loaded``: run this already-loaded model instead (``bench/gpu.py``).
        """
        self.lm = loaded if loaded is not None else await self._load()
        self.max_context = self.lm.max_context
        if not self.settings.model_name:
            self.model_name = self.lm.name
        self._start_backend()
        t0 = time.perf_counter()
        await self._warmup()
        self.warmup_s = time.perf_counter() - t0
        log.info(
            "transformers engine (batching %s): %s; warm-up %.2fs; generation defaults %s",
            self.batching,
            self.lm.describe(),
            self.warmup_s,
            self.server_fields or "the model's own",
        )
        self._ready = True

    async def stop(self) -> None:
        """Stop the backend; requests still running end with an error."""
        self._ready = False
        await asyncio.to_thread(self._stop_backend)

    async def _load(self) -> LoadedModel:
        """The model this engine runs (loaded off the event loop)."""
        from llmload.target_server.model.loader import load

        return await asyncio.to_thread(load, self.settings)

    def _start_backend(self) -> None:
        """Start engine threads (none for the thread-per-request engine)."""

    def _stop_backend(self) -> None:
        """Stop engine threads and wait for them."""

    async def _warmup(self) -> None:
        """Run a few short requests through ``generate`` so first-call costs are paid now."""
        tok = self._loaded().tokenizer
        room = max(1, min(self.max_context // 2, 256))

        async def one(i: int) -> None:
            req = GenerationRequest(f"warmup-{i}", None, WARMUP_PROMPT, 8, seed=i)
            ids = list(tok.encode(WARMUP_PROMPT * (i + 1)))[:room]
            async for _piece in self.generate(self.prepare_ids(req, ids)):  # type: ignore[attr-defined]  # generate is the subclass's (engines define it)
                pass

        await asyncio.gather(*(one(i) for i in range(self._warmup_requests())))

    def _warmup_requests(self) -> int:
        return 1

    def prepare(self, request: GenerationRequest) -> PreparedRequest:
        """Apply the chat template, count tokens, resolve generation settings."""
        return self.prepare_ids(request, self._encode(request))

    def prepare_ids(self, request: GenerationRequest, ids: list[int]) -> PreparedRequest:
        """``prepare`` for a prompt that is already token ids (benchmarks)."""
        from llmload.target_server.model.sampling import Sampler, penalty_processors, seed_for

        lm = self._loaded()
        param = "messages" if request.messages is not None else "prompt"
        if not ids:
            raise EngineInputError("the prompt is empty", param=param)
        if len(ids) >= self.max_context:
            raise EngineInputError(
                f"the prompt is {len(ids)} tokens; this model's context is {self.max_context}",
                param=param,
                code="context_length_exceeded",
            )
        gc, penalties, stops = genconfig.resolve(lm.generation_config, self.server_fields, request)
        self._check(gc)
        eos = gc.eos_token_id
        eos_ids = frozenset([eos] if isinstance(eos, int) else (eos or lm.eos_ids))
        gc.eos_token_id = sorted(eos_ids)
        if gc.pad_token_id is None:
            pad = lm.tokenizer.pad_token_id
            gc.pad_token_id = pad if pad is not None else min(eos_ids, default=0)
        max_new = min(request.max_tokens, self.max_context - len(ids))
        gc.max_new_tokens = max_new
        gc.min_new_tokens = min(gc.min_new_tokens or 0, max_new)
        seed = seed_for(request.seed, self._rng)
        # built here so a bad value is a 400 now, not an error mid-generation
        penalty_processors(gc, penalties, len(ids), sorted(eos_ids))
        Sampler(gc, seed)
        plan = Plan(ids, gc, penalties, stops, seed, max_new, eos_ids)
        return PreparedRequest(request=request, prompt_tokens=len(ids), payload=plan)

    def _check(self, gc: GenerationConfig) -> None:
        """Engine-specific refusals (raise ``EngineInputError``)."""

    def _encode(self, request: GenerationRequest) -> list[int]:
        tok = self._loaded().tokenizer
        if request.messages is None:
            return list(tok.encode(request.prompt or ""))
        messages = [
            {"role": m["role"], "content": m.get("content") or ""} for m in request.messages
        ]
        if tok.chat_template is None:
            text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
        else:
            text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(tok.encode(text, add_special_tokens=False))

    def _loaded(self) -> LoadedModel:
        if self.lm is None:
            raise RuntimeError("the transformers engine has not been started")
        return self.lm

    def waiting(self) -> int:
        """Requests handed to the engine that are not generating yet."""
        return 0

    def batch_size(self) -> int:
        """Requests in the engine's current decode step(s)."""
        return int(self.running())  # type: ignore[attr-defined]  # running is the subclass's (engines define it)

    def cuda_devices(self) -> list[int]:
        """The CUDA device (torch's index) the model is on; none on the CPU or before it loads.

        Plain ``cuda`` is the current device, which this server never changes: 0.
        """
        dev = self.lm.device if self.lm is not None else None
        if dev is None or dev.type != "cuda":
            return []
        return [dev.index if dev.index is not None else 0]

    def extra_metrics(self) -> dict[str, float]:
        """Engine load gauges; GPU memory on CUDA (the cache is never emptied per request)."""
        out = {
            "engine_busy_ratio": self.busy.ratio(),
            "engine_queue_depth": float(self.waiting()),
            "engine_batch_size": float(self.batch_size()),
        }
        budget = getattr(self, "prefill_budget", None)  # continuous batching's
        if budget:
            out["engine_prefill_budget_tokens"] = float(budget)
        if self.lm is None or self.lm.device.type != "cuda":
            return out
        import torch

        dev = self.lm.device
        out["gpu_memory_allocated_bytes"] = float(torch.cuda.memory_allocated(dev))
        out["gpu_memory_reserved_bytes"] = float(torch.cuda.memory_reserved(dev))
        return out


@dataclass(eq=False)
class Waiter:
    """The asyncio side of one request of a continuous-batching engine."""

    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    done: asyncio.Future[None] = field(init=False)

    def __post_init__(self) -> None:
        self.done = self.loop.create_future()


def check_no_beams(gc: Any) -> None:
    """Continuous batching samples one sequence per request: beam search is refused."""
    if (gc.num_beams or 1) > 1:
        raise EngineInputError("beam search needs --batching none", param="num_beams")


class ContinuousEngine(ModelEngine):
    """What both continuous-batching engines share (on a thread: ``batched``; in a
    process: ``engineproc``): the startup check, the batch limit, beam search
    refused, the warm-up size and the count of requests inside the engine."""

    batching = "continuous"

    def __init__(self, settings: Any):
        super().__init__(settings)
        genconfig.check_continuous(self.server_fields)
        self.max_batch = settings.max_concurrency or DEFAULT_MAX_BATCH
        self._active = 0  # requests inside the engine
        self._put = 0  # requests handed to the loop (queue depth = put - the loop's taken)

    def running(self) -> int:
        """Requests inside the engine (in the batch, queued or prefilling)."""
        return self._active

    def _check(self, gc: Any) -> None:
        check_no_beams(gc)

    def _warmup_requests(self) -> int:
        return WARMUP_REQUESTS

    def _left(self, _done: object = None) -> None:
        self._active -= 1


async def next_piece(pieces: asyncio.Queue[Any]) -> TokenPiece:
    """The next piece a generation thread sent; an exception it sent as an ``EngineFault``."""
    item = await pieces.get()
    if isinstance(item, BaseException):
        raise EngineFault(f"generation failed: {item}") from item
    return item


def _guess_name(model: str | None) -> str:
    return embedded.MODEL_NAME if not model else Path(model).expanduser().resolve().name


def _guess_context(model: str | None) -> int:
    """The context length before loading (config.json), so the server can show it early."""
    if not model:
        return int(embedded.MODEL_DIMS["max_position_embeddings"])
    try:
        config = json.loads((Path(model).expanduser() / "config.json").read_text())
        return int(config.get("max_position_embeddings") or 4096)
    except (OSError, ValueError):
        return 4096
