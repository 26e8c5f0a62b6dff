"""The synthetic engine: exact, configurable latencies and injected faults, no model.

Timing (from the moment ``generate`` is called, i.e. after admission):
first token at ``ttft_ms + prefill_ms_per_token * prompt_tokens`` (never
earlier), then one token every ``itl_ms`` (+ ``itl_growth_ms`` per other
running request) counted from when the first token really went out (a late
prefill delays the decode, as in a real server).  From there every token has
an absolute deadline, so sleeping late once does not delay the rest (deadlines
wait on ``target_server.pacer``: one timer per millisecond for all streams, never
early, so a token is at most ~1 ms late from the grid and the first never early);
``jitter_ms`` moves each deadline by a seeded uniform offset in
``[-jitter, +jitter]`` around its nominal time (it never accumulates);
``itl_spread`` gives each request a speed of its own (its ITL times a seeded
factor in ``[1 - spread, 1 + spread]``): its gaps are all fast or all slow together,
as on a real server for a request with a long context or one co-batched with prefills.

Prompt tokens are counted as ``ceil(utf8_bytes / 4)`` (+4 per chat message).
With ``--prefix-cache-blocks N`` the engine keeps a prefix cache
(``target_server.prefixcache``: an LRU of ``--block-size``-token blocks of those
tokens); the per-token prefill is then charged for the uncached prompt tokens only,
and the hit is reported as ``usage.prompt_tokens_details.cached_tokens``.
Output length is ``max_tokens`` with ``ignore_eos``; otherwise a seeded uniform
draw in ``[max(min_tokens, 1), max_tokens]`` ending with ``finish_reason
"stop"`` when shorter than ``max_tokens``.

Answer shapes (chat only; ``target_server.chunks`` writes them as vLLM does): the
first ``--reasoning-tokens`` of the output are reasoning; a request that carries
``tools`` is answered, with probability ``--tool-call-rate``, by a call of its first
(or its ``tool_choice``) function instead of text — one piece with the name, then
the arguments ``{"query": "<words>"}`` one token a piece, ``finish_reason
"tool_calls"``; ``--empty-rate`` answers with tokens that carry no text (what a
server sends for special tokens it skips: usage counts them, nothing shows).  The
same timetable in every case: a tool call's name is its first token.
"""

from __future__ import annotations

import math
import random
from collections.abc import AsyncIterator
from time import perf_counter
from typing import Any

from llmload.target_server.busy import CpuMeter
from llmload.target_server.engine import (
    EngineFault,
    GenerationRequest,
    PrefixHit,
    PreparedRequest,
    Timetable,
    TokenPiece,
    register,
)
from llmload.target_server.pacer import Pacer
from llmload.target_server.prefixcache import PrefixCache, block_keys

VOCAB = tuple(
    " " + w
    for w in (
        "the quick brown fox jumps over lazy dog and then some more tokens flow "
        "steadily from a synthetic engine that keeps exact time for every stream "
        "under load while clients measure latency throughput queue delay and errors"
    ).split()
)
_PIECES = tuple(TokenPiece(w) for w in VOCAB)
_REASONING = tuple(TokenPiece(w, kind="reasoning") for w in VOCAB)
_EMPTY = TokenPiece("")
DEFAULT_MAX_CONTEXT = 32768
#: a synthetic tool call's arguments: this opening, one word a token, then ``ARGS_CLOSE``
ARGS_OPEN = '{"query": "'
ARGS_CLOSE = '"}'


def count_tokens(request: GenerationRequest) -> int:
    """The synthetic tokenizer: ``ceil(utf8 bytes / 4)``, +4 per chat message, plus each
    image's tokens (``target_server.images``)."""
    images = sum(tokens for _, tokens in request.images)
    if request.messages is not None:
        return images + sum(
            4 + math.ceil(len(str(m.get("content") or "").encode()) / 4) for m in request.messages
        )
    return images + max(1, math.ceil(len((request.prompt or "").encode()) / 4))


def _pieces(text: str) -> list[bytes]:
    data = text.encode()
    return [data[i : i + 4] for i in range(0, len(data), 4)]


def prompt_tokens(request: GenerationRequest) -> list[object]:
    """The tokens ``count_tokens`` counts: per chat message four tokens naming its role,
    then its content's 4-byte pieces, then each image's tokens (named by the image, so a
    prefix cache tells images apart); a plain prompt's 4-byte pieces (at least one)."""
    if request.messages is not None:
        out: list[object] = []
        for m in request.messages:
            out += [("role", str(m.get("role")))] * 4
            out += _pieces(str(m.get("content") or ""))
        for identity, tokens in request.images:  # after the text: an approximation
            out += [("image", identity, i) for i in range(tokens)]
        return out
    pieces: list[object] = list(_pieces(request.prompt or ""))
    return pieces or [b""]


@register("synthetic")
class SyntheticEngine:
    """Tokens on a timetable; see the module docstring for the rules."""

    name = "synthetic"

    def __init__(self, settings: Any):
        self.settings = settings
        self.model_name: str = settings.model_name or "llmload-synthetic"
        self.max_context: int = settings.max_context or DEFAULT_MAX_CONTEXT
        self.max_output_tokens: int = settings.max_output_tokens
        self._rng = random.Random(settings.seed)
        self._running = 0
        self._ready = False
        self.pacer = Pacer()  # every stream's token deadlines on one timer per millisecond
        self.busy = CpuMeter()  # its limit is the event loop's core
        self.cache: PrefixCache | None = None
        if settings.prefix_cache_blocks:
            self.cache = PrefixCache(settings.prefix_cache_blocks, settings.block_size)

    @property
    def ready(self) -> bool:
        """True once ``start`` has run."""
        return self._ready

    async def start(self) -> None:
        """Nothing to load."""
        self._ready = True

    async def stop(self) -> None:
        """Nothing to free."""
        self._ready = False

    def running(self) -> int:
        """Requests currently generating."""
        return self._running

    def extra_metrics(self) -> dict[str, float]:
        """The engine load gauges the model engines export: busy is the process's CPU share
        (timers are all it computes), no queue inside the engine, every stream in the batch."""
        return {
            "engine_busy_ratio": self.busy.ratio(),
            "engine_queue_depth": 0.0,
            "engine_batch_size": float(self._running),
        }

    def prepare(self, request: GenerationRequest) -> PreparedRequest:
        """Count prompt tokens; with a prefix cache, also key the prompt's blocks."""
        n = count_tokens(request)
        if self.cache is None:
            return PreparedRequest(request=request, prompt_tokens=n)
        keys = block_keys(prompt_tokens(request), self.cache.block_size)
        return PreparedRequest(request, n, payload=keys, prefix=PrefixHit())

    def pool(self, texts: list[str]) -> tuple[list[int], float]:
        """Embeddings or rerank (``target_server.pooling``): each text's prompt tokens, and
        the seconds the request takes (``--ttft-ms`` plus the prefill of every token)."""
        tokens = [max(1, math.ceil(len(text.encode()) / 4)) for text in texts]
        s = self.settings
        return tokens, (s.ttft_ms + s.prefill_ms_per_token * sum(tokens)) / 1000.0

    def generate(self, prepared: PreparedRequest) -> AsyncIterator[TokenPiece]:
        """Draw this request's plan; raise ``EngineFault`` now for an injected failure."""
        return self.pacer.paced(self.timetable(prepared))

    def timetable(self, prepared: PreparedRequest, since: float | None = None) -> Timetable:
        """The plan as ``(deadline, piece)`` pairs: each piece is due at its ``perf_counter``
        deadline, the first never before it (``exact``).  Lazy: a deadline is drawn when
        the previous piece has gone out (so a late first token delays the decode, and the
        ITL growth sees the running count of the moment); ``close()`` ends it.

        ``since``: when the TTFT counts from (default now).  The server passes the
        request's arrival plus its wait for a slot, so the time it spent reading and
        checking the request is inside the configured TTFT, as a real engine's prefill
        would be, not added to it.

        The server's streaming path writes each piece from the pacer's tick itself
        (``target_server.generation``), no task per token; ``generate`` awaits the same
        plan (``Pacer.paced``).  Raises ``EngineFault`` now for an injected failure.
        """
        s, rng = self.settings, self._rng
        start = perf_counter() if since is None else since
        if s.fail_rate and rng.random() < s.fail_rate:
            raise EngineFault("injected failure (--fail-rate)")
        req = prepared.request
        lrng = random.Random(req.seed) if req.seed is not None else rng
        n = req.max_tokens
        if not req.ignore_eos:
            n = lrng.randint(max(req.min_tokens, 1), req.max_tokens)
        faults: dict[int, str] = {}
        for kind, rate in (
            ("stall", s.stall_rate),
            ("malformed", s.malformed_rate),
            ("disconnect", s.disconnect_rate),
        ):
            if rate and n > 1 and rng.random() < rate:
                faults[rng.randint(1, n - 1)] = kind
        computed = prepared.prompt_tokens
        if self.cache is not None and prepared.prefix is not None:
            prepared.prefix.tokens = self.cache.lookup(prepared.payload, computed)
            computed -= prepared.prefix.tokens
        first = start + (s.ttft_ms + s.prefill_ms_per_token * computed) / 1000.0
        offset = lrng.randrange(len(VOCAB))
        shape = self._shape(req, n, offset)
        return self._plan(n, first, offset, faults, req.stop, n == req.max_tokens, shape)

    def _shape(self, req: GenerationRequest, n: int, offset: int) -> list[TokenPiece] | None:
        """The answer's pieces when it is not plain text (module docstring), else None.

        Drawn after the faults, and only for a rate strictly between 0 and 1, so that a
        server without these flags draws exactly what it drew before them.
        """
        s, rng = self.settings, self._rng
        if s.empty_rate and (s.empty_rate >= 1 or rng.random() < s.empty_rate):
            return [_EMPTY] * n
        if req.messages is None:
            return None
        rate = s.tool_call_rate
        tool = bool(req.tools) and (
            req.tool_required or rate >= 1 or (rate > 0 and rng.random() < rate)
        )
        reasoning = min(s.reasoning_tokens, n)
        if not reasoning and not tool:
            return None
        k = len(VOCAB)
        out = [_REASONING[(offset + i) % k] for i in range(reasoning)]
        if tool:
            for i in range(reasoning, n):
                if i == reasoning:
                    out.append(TokenPiece(req.tools[0], kind="tool_name"))
                    continue
                text = VOCAB[(offset + i) % k]
                if i == reasoning + 1:
                    text = ARGS_OPEN + text.lstrip()
                if i == n - 1:
                    text += ARGS_CLOSE
                out.append(TokenPiece(text, kind="tool_args"))
        else:
            out += [_PIECES[(offset + i) % k] for i in range(reasoning, n)]
        return out

    def _plan(
        self,
        n: int,
        first: float,
        offset: int,
        faults: dict[int, str],
        stop: tuple[str, ...],
        by_length: bool,
        shape: list[TokenPiece] | None = None,
    ) -> Timetable:
        s, rng, pieces, k = self.settings, self._rng, _PIECES, len(_PIECES)
        itl, growth, jitter = s.itl_ms / 1000.0, s.itl_growth_ms / 1000.0, s.jitter_ms / 1000.0
        if s.itl_spread:
            itl *= 1.0 + rng.uniform(-s.itl_spread, s.itl_spread)
        nominal, prev, tail, fault = first, 0.0, "", None
        self._running += 1
        try:
            for i in range(n):
                if i:
                    nominal += itl + growth * (self._running - 1) if growth else itl
                deadline = nominal + rng.uniform(-jitter, jitter) if jitter else nominal
                if faults:
                    fault = faults.get(i)
                    if fault == "stall":
                        nominal += s.stall_s
                        deadline += s.stall_s
                if deadline < prev:  # jitter never reorders tokens
                    deadline = prev
                prev = deadline
                piece = pieces[(offset + i) % k] if shape is None else shape[i]
                if stop and piece.kind == "content":  # stop strings end the answer's text
                    tail = (tail + piece.text)[-64:]
                    if any(x in tail for x in stop):
                        yield deadline, TokenPiece("", finish_reason="stop")
                        return
                last = i == n - 1
                if fault is not None or last:
                    reason = None
                    if last:
                        reason = "length" if by_length else "stop"
                        if piece.kind.startswith("tool"):
                            reason = "tool_calls"
                    piece = TokenPiece(piece.text, reason, fault, piece.kind)  # type: ignore[arg-type]  # the fault is one of TokenPiece's kinds, checked when drawn
                yield deadline, piece
                if i == 0:  # decode starts when the first token really went out, as after a
                    nominal += max(0.0, perf_counter() - deadline)  # real (late) prefill
        finally:
            self._running -= 1
