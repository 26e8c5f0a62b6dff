"""The protocol-adapter contract.

An adapter knows one wire protocol (OpenAI chat completions, OpenAI
completions, Gradio, TGI, ...): how to turn a ``Prompt`` into an HTTP call, and
what each server-sent event or sync body *means*.  It does no I/O and keeps no
clock: the locust user sends the call, and the SSE timing core
(``loadtests.measure.timing``) feeds the adapter one event at a time and timestamps the
ones that carry content.  Adding a protocol is one small module that registers
itself with ``@register("name")``; nothing runs at import time but that.

Rules an adapter must keep, so every protocol is measured the same way
(``docs/metrics.md``, "Client-side definitions"):

* ``EventInfo.content`` is the *new* text this event adds (a cumulative
  protocol such as Gradio must diff).  Role-only deltas, empty deltas and
  usage-only chunks carry ``content == ""`` and so never count as the first
  token.  Reasoning text counts as content (``reasoning=True``), and so does a
  tool call's name or arguments (``tool_calls``: the indexes of the calls the
  event adds to).  When the event is not all answer text, ``answer`` is the part
  that is (``""`` for reasoning or a tool call alone; None: all of ``content``):
  the first event that is not reasoning alone is the first *output* token (TTFO).
* ``EventInfo.usage_output_tokens`` / ``usage_prompt_tokens`` are the server's
  own counts when the event carries them; ``usage_reasoning_tokens``
  (``completion_tokens_details.reasoning_tokens``) and ``usage_cached_tokens``
  (``prompt_tokens_details.cached_tokens``) its details.
* ``EventInfo.server`` carries the target's own timings when it reports them
  (``ttft_s``, ``queue_s``, ``e2e_s`` — the bundled server's ``x_llmload``).
* ``EventInfo.error`` is a server-side error event's message (``error_class``: its
  record class when not ``protocol`` — Anthropic's ``overloaded_error`` is
  ``overloaded``); ``done`` marks the protocol's end-of-stream (``data: [DONE]``,
  Gradio's ``complete``, the Responses API's ``response.completed``).
* ``EventInfo.unknown`` marks an event of a type the protocol does not define (a
  newer server's): skipped, and counted in the record's ``unknown_events``.

Optional class attributes: ``end_marker`` names the end-of-stream event in the
message of a stream that ended without it; ``sends_messages`` says the prompt
goes as chat messages (the target's tokenizer is asked with the chat template);
``api_key_header`` is the header ``--api-key-env`` fills (``Authorization``, as
``Bearer KEY``, unless the adapter names another, e.g. Anthropic's ``x-api-key``);
``streams = False`` says the API has no stream (runs are ``sync`` only), and
``pooled = True`` that it sends ``Prompt.inputs`` (``--batch-size`` texts the run
draws for each request: embeddings' inputs, rerank's documents).

Per-stream state: an adapter instance serves one request at a time (the runner
makes one per simulated user — factories are cheap — and a user's requests are
sequential), and ``build`` starts a new request.  So a cumulative protocol may
keep the text seen so far on the instance and reset it in ``build``.

Two-step protocols (optional, backwards compatible): Gradio's HTTP API first
answers ``POST /gradio_api/call/<api_name>`` with ``{"event_id": ...}`` and only
then streams the result from ``GET /gradio_api/call/<api_name>/<event_id>``.
An adapter for such a protocol also defines
``follow_up(first_response_body: bytes) -> HttpCall`` (see ``TwoStepAdapter``).
The runner sends ``build``'s call, reads that whole (small) response, and when
its status is 2xx and the adapter has ``follow_up`` it sends the returned call;
the *second* response is the one the timing core reads (``parse_event`` /
``parse_body``).  ``t0`` stays the moment the first call was handed to the
client — the user waits for both — and ``headers_s`` is the second response's.
A non-2xx first response is recorded like any HTTP error; ``follow_up`` raises
``ValueError`` for a body it cannot read (recorded as ``protocol``).  Use
``follow_up_of(adapter)`` to get the hook or ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from llmload.loadtests.measure.record import Mode


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request's input, as a scenario chose it."""

    scenario: str
    prompt_id: str
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    max_tokens: int = 256
    turn: int = 0
    #: at least this many output tokens (sent where the protocol has a field for it)
    min_tokens: int | None = None
    #: chat: the functions offered (OpenAI ``tools``) and ``tool_choice`` ("none", "auto", ...)
    tools: tuple[dict[str, Any], ...] | None = None
    tool_choice: str | None = None
    #: an agent session's id and the step (model call) this prompt is in it
    session_id: str | None = None
    step: int | None = None
    #: images sent with the last user message: ``data:`` or remote URLs (``--images``)
    images: tuple[str, ...] = ()
    #: embeddings: the texts to embed; rerank: the documents (``--batch-size`` of them)
    inputs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class HttpCall:
    """What to send: path is relative to the target's base URL (prefix included by the client)."""

    method: str
    path: str
    json: dict[str, Any] | None
    headers: dict[str, str] = field(default_factory=dict)
    stream: bool = False


@dataclass(frozen=True, slots=True)
class EventInfo:
    """The meaning of one SSE event (or of a whole sync body)."""

    content: str = ""
    reasoning: bool = False
    usage_output_tokens: int | None = None
    usage_prompt_tokens: int | None = None
    server: dict[str, float] | None = None
    finish_reason: str | None = None
    error: str | None = None
    done: bool = False
    #: the answer text in ``content`` when not all of it is (reasoning, a tool call)
    answer: str | None = None
    #: indexes of the tool calls this event carries a piece of (name or arguments)
    tool_calls: tuple[int, ...] = ()
    usage_reasoning_tokens: int | None = None
    usage_cached_tokens: int | None = None
    error_class: str | None = None
    unknown: bool = False

    @property
    def output(self) -> bool:
        """Whether the event's content holds output, not only reasoning (answer or a call)."""
        return self.answer is None or bool(self.answer) or bool(self.tool_calls)


class Adapter(Protocol):
    #: registry name, e.g. "openai-chat"
    name: str
    #: low-cardinality endpoint label for metrics, e.g. "/v1/chat/completions"
    endpoint: str

    def build(self, prompt: Prompt, *, mode: Mode, model: str, options: dict[str, Any]) -> HttpCall:
        """The HTTP call for this prompt.  ``options``: temperature, seed, ignore_eos, ..."""
        ...

    def parse_event(self, event: str | None, data: str) -> EventInfo:
        """Interpret one SSE event (``event:`` name or None, joined ``data:`` lines).

        Raise ``ValueError`` for data this protocol cannot parse: the timing
        core records the request as ``protocol``.
        """
        ...

    def parse_body(self, body: bytes) -> EventInfo:
        """Interpret a complete non-streaming response body (same rules)."""
        ...


def chat_messages(prompt: Prompt) -> list[dict[str, Any]]:
    """The prompt as chat messages (a plain prompt is one user message); ``ValueError`` for
    a prompt with neither."""
    if prompt.messages is not None:
        return prompt.messages
    if prompt.prompt is not None:
        return [{"role": "user", "content": prompt.prompt}]
    raise ValueError(f"prompt {prompt.prompt_id!r} has neither messages nor prompt")


def attach_images(
    messages: list[dict[str, Any]],
    images: tuple[str, ...],
    text_part: Callable[[str], dict[str, Any]],
    image_part: Callable[[str], dict[str, Any]],
) -> list[dict[str, Any]]:
    """``messages`` with ``images`` in the last user message (its text made a part first,
    in the API's own shapes: ``text_part``, ``image_part``); the same list without images."""
    if not images:
        return messages
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    out = list(messages)
    if not users:
        out.append({"role": "user", "content": ""})
        users = [len(out) - 1]
    message = dict(out[users[-1]])
    text = message.get("content") or ""
    message["content"] = [text_part(str(text)), *(image_part(url) for url in images)]
    out[users[-1]] = message
    return out


ADAPTERS: dict[str, Callable[[], Adapter]] = {}
#: the header ``--api-key-env`` fills when the adapter names none
DEFAULT_KEY_HEADER = "Authorization"


def api_key_header(protocol: str) -> str:
    """The header a protocol's API key goes in (``Authorization`` takes ``Bearer KEY``)."""
    return str(getattr(ADAPTERS.get(protocol), "api_key_header", DEFAULT_KEY_HEADER))


def streams(protocol: str) -> bool:
    """Whether a protocol has a streamed mode (embeddings and rerank have not: ``streams``)."""
    return bool(getattr(ADAPTERS.get(protocol), "streams", True))


def pooled(protocol: str) -> bool:
    """Whether a protocol sends ``Prompt.inputs`` (embeddings, rerank: ``pooled``)."""
    return bool(getattr(ADAPTERS.get(protocol), "pooled", False))


def sends_messages(protocol: str) -> bool:
    """Whether a protocol sends its prompt as chat messages (``sends_messages``)."""
    return bool(getattr(ADAPTERS.get(protocol), "sends_messages", False))


def register(name: str) -> Callable[[Callable[[], Adapter]], Callable[[], Adapter]]:
    """Decorator: register an adapter factory under ``name``."""

    def deco(factory: Callable[[], Adapter]) -> Callable[[], Adapter]:
        ADAPTERS[name] = factory
        return factory

    return deco


@runtime_checkable
class TwoStepAdapter(Protocol):
    """The optional hook of a two-step protocol (module docstring, "Two-step protocols")."""

    def follow_up(self, first_response_body: bytes) -> HttpCall: ...


def follow_up_of(adapter: object) -> Callable[[bytes], HttpCall] | None:
    """The adapter's ``follow_up`` hook, or None for a one-step protocol."""
    hook = getattr(adapter, "follow_up", None)
    return hook if callable(hook) else None
