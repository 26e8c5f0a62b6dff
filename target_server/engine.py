"""The engine contract: what the HTTP layer needs from a text generator.

The server (``target_server.app``) owns HTTP, SSE, admission, metrics and
timing; an engine owns only tokens.  Engines are registered by name in
``ENGINES`` and built by the CLI; the app factory receives a ready instance.

Lifecycle::

    engine = ENGINES["synthetic"](settings)   # cheap, no loading
    await engine.start()                      # load + warm up; /health is 503 until done
    prepared = engine.prepare(request)        # tokenise, validate; raises EngineInputError
    async for piece in engine.generate(prepared):
        ...                                   # one TokenPiece per generated token
    await engine.stop()

Cancellation: the server stops iterating and calls ``aclose()`` on the async
iterator returned by ``generate`` when the client disconnects.  An engine must
stop the request's generation at that point (within one decode step) and free
whatever it holds; ``finally:`` blocks in an async generator are the place.

Failures: ``EngineFault`` (or any exception) raised by the *call*
``engine.generate(prepared)`` itself, before it returns the iterator, is
answered with HTTP 500 (the synthetic engine injects ``--fail-rate`` this way,
so write ``generate`` as a plain method returning an async generator when it
must refuse up front).  Once the iterator exists a streaming response has
started (headers and the role delta are sent at once, like vLLM), so an
exception raised while iterating becomes an SSE error event and the stream ends
without ``[DONE]``; a non-streaming request still gets a 500.

Timetables (optional; the synthetic engine): an engine whose every token's due
time is known in advance may also be a ``TimetableEngine``: ``timetable(prepared)``
— the same checks as ``generate``, returning a plain generator of ``(deadline,
piece)`` pairs (``perf_counter`` times, the first never to go out early) — and a
``pacer`` (``target_server.pacer.Pacer``).  The server then streams such a
request from the pacer's ticks, writing each piece straight to the connection
without waking the request's task (``target_server.generation``), and
``close()``s the generator when the request ends or is cancelled.

Faults (synthetic engine only): an engine may yield a
``TokenPiece`` whose ``fault`` is set mid-stream; the server then acts it out
(``"disconnect"``: drop the connection; ``"malformed"``: write one broken SSE
line; ``"stall"``: the engine itself slept before this piece, the server only
counts the request as ``stall``).

Answer shapes (synthetic engine only): a piece's ``kind`` says what it is in a chat
answer (``PieceKind``): reasoning text (sent as ``reasoning_content``), a tool call's
name (its first piece) and argument pieces, or plain content (the default, and all a
model engine yields).  An empty ``text`` is a token the client never sees (a special
token the server skipped), still counted in ``usage``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeGuard

if TYPE_CHECKING:
    from llmload.target_server.pacer import Pacer

#: "disconnect": drop the connection before this piece; "malformed": write one broken
#: SSE line before it; "stall": the engine slept (stalled) before it -- status only.
Fault = Literal["disconnect", "malformed", "stall"]
#: what a piece is in a chat answer: answer text; reasoning (``reasoning_content``); a tool
#: call's function name (its first piece: the call's id, type and name) or a piece of its
#: JSON arguments.  A completions answer is text only.
PieceKind = Literal["content", "reasoning", "tool_name", "tool_args"]


class EngineInputError(ValueError):
    """The request cannot be served as asked (prompt too long, bad parameter).

    The server answers 400 with an OpenAI error object; ``param`` names the field.
    """

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code


class EngineFault(RuntimeError):
    """An injected or real engine failure before the first token (HTTP 500)."""


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One validated request, as the HTTP layer hands it to an engine."""

    request_id: str
    # exactly one of messages / prompt is set
    messages: list[dict[str, Any]] | None
    prompt: str | None
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    # fields of an HF GenerationConfig given per request (transformers engine)
    extra: dict[str, Any] = field(default_factory=dict)
    # chat: names of the functions the request offers as ``tools`` (empty: none, or
    # ``tool_choice`` "none"); ``tool_required``: ``tool_choice`` asks for a call
    tools: tuple[str, ...] = ()
    tool_required: bool = False
    # images in the prompt, each (identity, prompt tokens) (``target_server.images``): the
    # synthetic engine charges their tokens; a text-only model does not see them
    images: tuple[tuple[str, int], ...] = ()


@dataclass(slots=True)
class PrefixHit:
    """Prompt tokens an engine's prefix cache served; set when the request is scheduled."""

    tokens: int = 0


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A request after ``Engine.prepare``: tokenised and ready to generate."""

    request: GenerationRequest
    prompt_tokens: int
    # engine-private payload (token ids, tensors, the synthetic plan, ...)
    payload: Any = None
    #: an engine with a prefix cache: its hit, filled in when the request is scheduled
    #: (``usage.prompt_tokens_details.cached_tokens``); None: the engine caches nothing
    prefix: PrefixHit | None = None


@dataclass(frozen=True, slots=True)
class TokenPiece:
    """One generated token.  ``text`` may be empty (a partial UTF-8 sequence)."""

    text: str
    # set on the last piece: "stop", "length" or "tool_calls"
    finish_reason: str | None = None
    fault: Fault | None = None
    kind: PieceKind = "content"


class Engine(Protocol):
    name: str
    model_name: str
    max_context: int
    max_output_tokens: int

    @property
    def ready(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def prepare(self, request: GenerationRequest) -> PreparedRequest: ...

    def generate(self, prepared: PreparedRequest) -> AsyncIterator[TokenPiece]: ...

    def running(self) -> int:
        """Requests currently generating inside the engine (for the gauge)."""
        ...

    def extra_metrics(self) -> dict[str, float]:
        """Optional engine gauges, e.g. ``gpu_memory_allocated_bytes``."""
        ...

    # Optional too (read with ``getattr``): ``cuda_devices() -> list[int]``, the CUDA
    # devices (torch's ``cuda:N`` indexes) the engine's model is on, asked once the engine
    # is ready; the server's ``/metrics`` then carries their NVML figures
    # (``target_server.nvmlgauges``).  The synthetic engine has none.


#: a request's plan: ``(deadline, piece)`` pairs, ``perf_counter`` deadlines, the first
#: never to go out early; lazy, and ``close()`` ends it (``TimetableEngine.timetable``)
Timetable = Generator[tuple[float, TokenPiece], None, None]


class TimetableEngine(Protocol):
    """An engine that knows every token's due time in advance (the synthetic one).

    ``is_timetable_engine(engine)`` is how the server picks the ticked path
    (``target_server.generation``); other engines are streamed from ``generate``.
    """

    #: the engine's token clock: ``pacer.paced(table)`` awaits a timetable in a task,
    #: ``pacer.call_at`` writes its pieces from the ticks
    pacer: Pacer

    def timetable(self, prepared: PreparedRequest, since: float | None = None) -> Timetable:
        """The plan for ``prepared``, with ``generate``'s checks (``EngineFault`` now).

        ``since``: when the TTFT counts from (default now); the server passes the
        request's arrival plus its wait for an admission slot.
        """
        ...


def is_timetable_engine(engine: object) -> TypeGuard[TimetableEngine]:
    """Whether ``engine`` offers a timetable and a pacer (narrows it for the type checker).

    Asked once per request, so not ``isinstance`` against a ``runtime_checkable``
    protocol: that walks the protocol's members at ~20 µs a call on Python 3.11,
    these two look-ups well under one.
    """
    return getattr(engine, "timetable", None) is not None and hasattr(engine, "pacer")


def engine_fault(engine: Any) -> str | None:
    """Why a started engine stopped working (an engine process that died), else None.

    Engines may set a ``fault`` attribute; they then report ``ready`` False.
    """
    fault = getattr(engine, "fault", None)
    return str(fault) if fault else None


#: name -> factory(settings) ; settings is the parsed server configuration.
ENGINES: dict[str, Callable[[Any], Engine]] = {}


def register(name: str) -> Callable[[Callable[[Any], Engine]], Callable[[Any], Engine]]:
    """Decorator: ``@register("synthetic")`` on an engine factory or class."""

    def deco(factory: Callable[[Any], Engine]) -> Callable[[Any], Engine]:
        ENGINES[name] = factory
        return factory

    return deco


#: engines living in their own package, imported only when chosen (torch is slow to import)
LAZY_ENGINE_MODULES: dict[str, str] = {
    "synthetic": "llmload.target_server.synthetic",
    "transformers": "llmload.target_server.model",
}


#: third-party modules an engine needs beyond the core install, and the extra that has them
ENGINE_EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "transformers": ("server", ("torch", "transformers")),
}


class EngineUnavailable(RuntimeError):
    """The chosen engine needs packages this install leaves out (the message says which)."""


def _check_extra(name: str) -> None:
    """``EngineUnavailable`` naming the pip command when an engine's extra is not installed."""
    import importlib.util

    extra, modules = ENGINE_EXTRAS.get(name, ("", ()))
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise EngineUnavailable(
            f"the {name} engine needs {' and '.join(missing)}, which the core install leaves "
            f"out: pip install 'llmload[{extra}]' (in a checkout: pip install -e '.[{extra}]', "
            "or make install); --engine synthetic needs nothing more"
        )


def build_engine(settings: Any) -> Engine:
    """``ENGINES[settings.engine](settings)``, importing the engine's module on first use."""
    name = settings.engine
    if name not in ENGINES and name in LAZY_ENGINE_MODULES:
        import importlib

        _check_extra(name)
        importlib.import_module(LAZY_ENGINE_MODULES[name])
    if name not in ENGINES:
        raise ValueError(
            f"unknown engine {name!r}; known: {sorted(set(ENGINES) | set(LAZY_ENGINE_MODULES))}"
        )
    return ENGINES[name](settings)
