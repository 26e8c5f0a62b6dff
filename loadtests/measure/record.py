"""The one record type that flows from the SSE timing core to every consumer.

A ``RequestRecord`` is born in the timing core (``loadtests.measure.timing``), one per
issued request, whatever happened to it.  The locust layer, the run writer, the
exporter and the reports consume it; nothing downstream re-parses SSE.

Field meanings follow the metric definitions in ``docs/metrics.md``.  Durations are
seconds on a monotonic clock measured from ``t0`` (the moment the request was handed to the
HTTP client); ``started_at`` is the only wall-clock value.  A duration that never
happened (no first token on a failed request) is ``None``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import orjson

_orjson_dumps = orjson.dumps

Mode = Literal["stream", "sync"]
TokenSource = Literal["usage", "tokenizer", "events"]
#: how a stream ended: "done" = the protocol's end marker (``data: [DONE]``, Gradio's
#: ``complete``); "eof" = the body ended cleanly without one (``transformers serve``)
StreamEnd = Literal["done", "eof"]

#: ``status`` is "ok" or one of these error classes.
ERROR_CLASSES = (
    "http_4xx",
    "http_5xx",
    # a 4xx saying prompt + max_tokens exceed the target's context length
    # (``loadtests.measure.overflow``)
    "context_overflow",
    "timeout",
    "stall",
    "disconnect",
    "protocol",
    "connect",
    # distributed runs: started on a worker that died before reporting how it ended
    "lost",
    # the target said it is overloaded: HTTP 529, or Anthropic's ``overloaded_error`` event
    "overloaded",
)
STATUSES = ("ok", *ERROR_CLASSES)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """Everything measured about one request.  Immutable once built."""

    request_id: str
    phase: str
    scenario: str
    mode: Mode
    endpoint: str
    started_at: float
    status: str
    ttft_s: float | None = None
    e2e_s: float | None = None
    headers_s: float | None = None
    tpot_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    output_tokens: int | None = None
    token_source: TokenSource = "events"
    prompt_tokens: int | None = None
    error: str | None = None
    # time to the second content event (issue: time to second token)
    ttst_s: float | None = None
    # tokens carried by each content event, aligned with content events
    tokens_per_event: list[int] = field(default_factory=list)
    # output token counts from each source that was available
    usage_output_tokens: int | None = None
    client_output_tokens: int | None = None
    # the target's own timings (bundled server: ``x_llmload``)
    server_ttft_s: float | None = None
    server_queue_s: float | None = None
    server_e2e_s: float | None = None
    # open-loop shapes: actual send time minus intended send time
    schedule_delay_s: float | None = None
    # HTTP status code when one was received
    http_status: int | None = None
    # multi-turn conversations: 0-based turn index
    turn: int = 0
    # which load-generator process issued it ("local", or a locust worker id)
    worker: str = "local"
    user_id: int | None = None
    warmup: bool = False
    finish_reason: str | None = None
    # streams: "done" (end marker seen) or "eof" (clean end of body, no marker); None for a
    # sync request or a stream cut by a transport error.  A stream that delivered its
    # finish_reason and then ended cleanly is ``ok`` either way.
    stream_end: StreamEnd | None = None
    # set-up of the connection this request opened (TCP, plus TLS for https), inside its
    # TTFT; None when it reused a kept-alive connection
    connect_s: float | None = None
    # time to first output token: the first answer text or tool-call piece, after any
    # reasoning (equal to ttft_s when the answer does not begin with reasoning)
    ttfo_s: float | None = None
    # reasoning tokens: usage.completion_tokens_details.reasoning_tokens when the server
    # gives it, else counted (None: could not be counted); part of output_tokens
    reasoning_tokens: int | None = None
    # usage.prompt_tokens_details.cached_tokens (prompt tokens served from a prefix cache)
    cached_tokens: int | None = None
    # tool calls in the answer
    tool_calls: int = 0
    # ok, and usage says tokens were generated, but nothing visible arrived (no TTFT)
    no_output: bool = False
    # agent sessions (``--dataset agent``): which session, and its 0-based step (model call)
    session_id: str | None = None
    step: int | None = None
    # the send side: t0 to the request's last byte written (connection set-up included) —
    # all a late event loop can still add to a time counted from t0 (arrivals are stamped
    # by the kernel); None when the request was never written whole
    send_s: float | None = None
    # events of a type the protocol does not define (a newer server's): skipped, counted
    unknown_events: int = 0
    # images sent with the request (``--images``); their tokens are in prompt_tokens
    images: int = 0
    # embeddings and rerank: the texts sent (inputs, documents); None for generation
    inputs: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """Every field by name (lists copied), as ``dataclasses.asdict`` gives it.

        Written out directly: ``asdict`` recurses and deep-copies each value, and a
        distributed master serialises every record of every worker — it was most of
        the master's cost per record (py-spy: ``docs/scale.md``, *Distributed*).
        """
        return {
            name: (list(value) if type(value) is list else value)
            for name in _FIELD_NAMES
            for value in (getattr(self, name),)
        }

    def to_json(self) -> str:
        """One compact JSON line (``requests.jsonl``), by orjson: a fraction of ``json``'s
        cost per record (measured: docs/scale.md, *The load generator*, "After (3)");
        the same values as ``json`` wrote (a small float spelled ``0.00001``, not ``1e-05``; a
        NaN as ``null``).  What orjson refuses (a lone surrogate in an error message) goes
        through ``json`` as before."""
        data = self.to_dict()
        try:
            return _orjson_dumps(data).decode()
        except TypeError:  # orjson.JSONEncodeError
            return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        """Build from a decoded JSON object; unknown keys are ignored."""
        if data.keys() <= _FIELD_SET:  # the usual case, checked in C: no copy to filter
            return cls(**data)
        return cls(**{k: v for k, v in data.items() if k in _FIELD_SET})

    @classmethod
    def from_json(cls, line: str) -> RequestRecord:
        return cls.from_dict(json.loads(line))


#: the record's field names, in declaration order (``to_dict``/``from_dict``)
_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))
_FIELD_SET = frozenset(_FIELD_NAMES)
