"""The SSE timing core: byte chunks and timestamps in, one ``RequestRecord`` out.

Pure: no I/O, no clock of its own, no global settings.  The caller (a locust
user) reads the socket, stamps each read with its monotonic clock and hands the
bytes over; ``finish`` turns what was seen into the record (the metric definitions
of ``docs/metrics.md``).  The per-event path is kept cheap: byte-level framing in
``loadtests.measure.sse``, the adapter's reading of each data event (the OpenAI
adapters cut a plain chunk's text out of the stream's learnt chunk skeleton or
decode it with orjson, and read every other event with ``json.loads``), a list
append per content event; everything else happens once, in ``finish``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from llmload.loadtests.measure.adapters.base import Adapter, EventInfo
from llmload.loadtests.measure.caps import MAX_EVENT_BYTES
from llmload.loadtests.measure.overflow import is_context_overflow
from llmload.loadtests.measure.record import Mode, RequestRecord, StreamEnd, TokenSource
from llmload.loadtests.measure.sse import SSEParser

#: transport-level error classes the caller may pass to ``finish(status=...)``
TRANSPORT_STATUSES = ("timeout", "stall", "disconnect", "connect", "http_4xx", "http_5xx")
#: statuses after which the response body did not end normally (no e2e time)
#: Anthropic's "overloaded" status (a class of its own: ``overloaded``)
OVERLOADED_HTTP = 529
_NO_END = frozenset({"timeout", "stall", "disconnect", "connect"})
#: at most this much of an error body is kept for its message
_ERROR_BODY_LIMIT = 64 * 1024
_ERROR_TEXT_LIMIT = 500
_HEAD_LIMIT = 200
#: what an adapter may raise on data it cannot read (recorded as ``protocol``)
_PARSE_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError)


@dataclass(frozen=True, slots=True)
class RecordMeta:
    """Who and what the request was; filled in by the runner, copied into the record."""

    request_id: str
    phase: str
    scenario: str
    mode: Mode
    endpoint: str
    started_at: float
    schedule_delay_s: float | None = None
    turn: int = 0
    worker: str = "local"
    user_id: int | None = None
    warmup: bool = False
    session_id: str | None = None
    step: int | None = None
    images: int = 0
    inputs: int | None = None


class StreamTimer:
    """Times one request: ``headers``, ``feed`` (stream) or ``feed_body`` (sync), ``finish``."""

    __slots__ = (
        "_adapter",
        "_t0",
        "_tokenizer",
        "_parser",
        "_times",
        "_pieces",
        "_text",
        "_last_event_at",
        "_headers_at",
        "_http_status",
        "_error_body",
        "_sync",
        "_done",
        "_protocol_error",
        "_usage_out",
        "_usage_prompt",
        "_usage_at",
        "_server",
        "_finish_reason",
        "_head",
        "_reasoning_at",
        "_connect_s",
        "_answers",
        "_output_at",
        "_tools",
        "_usage_reasoning",
        "_usage_cached",
        "_sent_at",
        "_error_class",
        "_unknown",
    )

    def __init__(
        self,
        adapter: Adapter,
        t0: float,
        *,
        tokenizer: Callable[[str], int] | None = None,
        max_event: int = MAX_EVENT_BYTES,
    ) -> None:
        self._adapter = adapter
        self._t0 = t0
        self._tokenizer = tokenizer
        self._parser = SSEParser(max_event)  # ``feed`` raises ``OverCap`` past it
        self._times: list[float] = []  # arrival of each content event
        self._pieces: list[str] = []  # its new text
        self._text: str | None = ""
        self._last_event_at: float | None = None
        self._headers_at: float | None = None
        self._http_status: int | None = None
        self._error_body: bytearray | None = None
        self._sync = False
        self._done = False
        self._protocol_error: str | None = None
        self._usage_out: int | None = None
        self._usage_prompt: int | None = None
        self._usage_at: dict[int, int] = {}  # content-event index -> cumulative usage
        self._server: dict[str, float] | None = None
        self._finish_reason: str | None = None
        self._head = b""  # first bytes of a stream, until its first event
        self._reasoning_at: set[int] = set()  # content-event indexes that carried reasoning
        self._connect_s: float | None = None
        # content-event index -> its answer text, for events not all answer (reasoning, calls)
        self._answers: dict[int, str] = {}
        self._output_at: float | None = None  # arrival of the first output (not reasoning alone)
        self._tools: set[int] = set()  # indexes of the tool calls seen
        self._usage_reasoning: int | None = None
        self._usage_cached: int | None = None
        self._sent_at: float | None = None
        self._error_class = "protocol"  # the class of ``_protocol_error``
        self._unknown = 0  # events of a type the protocol does not define

    # -- input -------------------------------------------------------------------------

    def headers(self, t: float, http_status: int) -> None:
        """The response headers arrived at ``t``."""
        self._headers_at = t
        self._http_status = http_status
        if http_status >= 400:
            self._error_body = bytearray()

    def connected(self, seconds: float) -> None:
        """This request opened its connection (TCP, and TLS for https) in ``seconds``."""
        self._connect_s = seconds

    def sent(self, t: float) -> None:
        """The request's last byte was written at ``t`` (a two-step protocol: its last request)."""
        self._sent_at = t

    def feed(self, chunk: bytes, t: float) -> None:
        """Streaming: raw body bytes as read (any split), read at ``t``.

        Raises ``OverCap`` when an event grows past ``max_event`` before its end."""
        if self._error_body is not None:
            self._keep_error_body(chunk)
            return
        events = self._parser.feed(chunk)
        if not events:
            if self._last_event_at is None and len(self._head) < _HEAD_LIMIT:
                self._head += chunk[:_HEAD_LIMIT]  # kept to diagnose a body that is not SSE
            return
        self._last_event_at = t
        parse = self._adapter.parse_event
        for event, data in events:  # the hot loop: keep it lean
            try:
                info = parse(event, data)
            except _PARSE_ERRORS as exc:
                if self._protocol_error is None:
                    self._protocol_error = f"unparseable event: {exc}: {data[:200]!r}"
                continue
            if info.done:
                self._done = True
            self._apply(info, t)

    def feed_body(self, body: bytes, t: float) -> None:
        """Sync: the whole body arrived at ``t``."""
        self._sync = True
        self._last_event_at = t
        if self._error_body is not None:
            self._keep_error_body(body)
            return
        try:
            info = self._adapter.parse_body(body)
        except _PARSE_ERRORS as exc:
            self._protocol_error = f"unparseable response body: {exc}"
            return
        self._done = info.done or info.error is None
        self._apply(info, t)

    @property
    def text(self) -> str:
        """The answer text received so far, without reasoning or tool-call text: the
        assistant's reply (history)."""
        if self._text is None:
            pieces, answers = self._pieces, self._answers
            self._text = (
                "".join(answers.get(i, p) for i, p in enumerate(pieces))
                if answers
                else "".join(pieces)
            )
        return self._text

    @property
    def reasoning_text(self) -> str:
        """The reasoning text received so far (it counts as content for TTFT and tokens):
        of each event that carried reasoning, the text before its answer."""
        pieces, answers = self._pieces, self._answers
        return "".join(
            pieces[i][: len(pieces[i]) - len(answers.get(i, ""))]
            for i in sorted(self._reasoning_at)
        )

    @property
    def last_event_at(self) -> float | None:
        """When the last SSE event (or the sync body) arrived; None before the first one."""
        return self._last_event_at

    # -- per event ---------------------------------------------------------------------

    def _on_trailing(self, event: str | None, data: str, t: float) -> None:
        """An event cut off by the end of the body: used when readable, else ignored."""
        self._last_event_at = t
        try:
            info = self._adapter.parse_event(event, data)
        except _PARSE_ERRORS:
            return
        if info.done:
            self._done = True
        self._apply(info, t)

    def _apply(self, info: EventInfo, t: float) -> None:
        if info.content:
            self._times.append(t)
            self._pieces.append(info.content)
            self._text = None
            if info.answer is not None:  # not all answer text: reasoning or a tool call
                index = len(self._pieces) - 1
                self._answers[index] = info.answer
                if info.reasoning:
                    self._reasoning_at.add(index)
            if self._output_at is None and info.output:
                self._output_at = t
            if info.usage_output_tokens is not None:
                self._usage_at[len(self._times) - 1] = info.usage_output_tokens
        if info.tool_calls:
            self._tools.update(info.tool_calls)
        if info.usage_output_tokens is not None:
            self._usage_out = info.usage_output_tokens
        if info.usage_prompt_tokens is not None:
            self._usage_prompt = info.usage_prompt_tokens
        if info.usage_reasoning_tokens is not None:
            self._usage_reasoning = info.usage_reasoning_tokens
        if info.usage_cached_tokens is not None:
            self._usage_cached = info.usage_cached_tokens
        if info.server:
            self._server = info.server if self._server is None else {**self._server, **info.server}
        if info.finish_reason:
            self._finish_reason = info.finish_reason
        if info.error and self._protocol_error is None:
            self._protocol_error = f"server error event: {info.error}"
            self._error_class = info.error_class or "protocol"
        if info.unknown:
            self._unknown += 1

    def _keep_error_body(self, chunk: bytes) -> None:
        assert self._error_body is not None
        room = _ERROR_BODY_LIMIT - len(self._error_body)
        if room > 0:
            self._error_body += chunk[:room]

    # -- the record --------------------------------------------------------------------

    def finish(
        self,
        t_end: float,
        meta: RecordMeta,
        *,
        status: str | None = None,
        error: str | None = None,
    ) -> RequestRecord:
        """Build the one record for this request.  ``status``: a transport error class, if any."""
        if self._error_body is None and not self._sync:
            for event, data in self._parser.close():  # a trailing event without its blank line
                self._on_trailing(event, data, t_end)
        stream_end = self._stream_end(status)
        status, error = self._status(status, error)
        t0 = self._t0
        times = self._times
        n_events = len(times)
        text = "".join(self._pieces)  # answer and reasoning: both are output tokens

        client_tokens: int | None = None
        if self._tokenizer is not None and text:
            client_tokens = self._tokenizer(text)
        elif not self._sync:
            client_tokens = n_events
        source: TokenSource
        if self._usage_out is not None:
            output_tokens: int | None = self._usage_out
            source = "usage"
        elif self._tokenizer is not None:
            output_tokens, source = client_tokens or 0, "tokenizer"
        else:
            output_tokens, source = n_events, "events"

        ttft = times[0] - t0 if times else None
        ttfo = self._output_at - t0 if self._output_at is not None else None
        ttst = times[1] - t0 if n_events > 1 and not self._sync else None
        itl = [b - a for a, b in zip(times, times[1:], strict=False)] if not self._sync else []
        tpot = None
        if not self._sync and n_events > 1 and output_tokens is not None and output_tokens > 1:
            tpot = (times[-1] - times[0]) / (output_tokens - 1)
        e2e = None if status in _NO_END else t_end - t0
        server = self._server or {}
        return RequestRecord(
            request_id=meta.request_id,
            phase=meta.phase,
            scenario=meta.scenario,
            mode=meta.mode,
            endpoint=meta.endpoint,
            started_at=meta.started_at,
            status=status,
            ttft_s=ttft,
            e2e_s=e2e,
            headers_s=None if self._headers_at is None else self._headers_at - t0,
            tpot_s=tpot,
            itl_s=itl,
            output_tokens=output_tokens,
            token_source=source,
            prompt_tokens=self._usage_prompt,
            error=error,
            ttst_s=ttst,
            tokens_per_event=self._tokens_per_event(output_tokens, source),
            usage_output_tokens=self._usage_out,
            client_output_tokens=client_tokens,
            server_ttft_s=server.get("ttft_s"),
            server_queue_s=server.get("queue_s"),
            server_e2e_s=server.get("e2e_s"),
            schedule_delay_s=meta.schedule_delay_s,
            http_status=self._http_status,
            turn=meta.turn,
            worker=meta.worker,
            user_id=meta.user_id,
            warmup=meta.warmup,
            finish_reason=self._finish_reason,
            stream_end=stream_end,
            connect_s=self._connect_s,
            ttfo_s=ttfo,
            reasoning_tokens=self._reasoning_tokens(),
            cached_tokens=self._usage_cached,
            tool_calls=len(self._tools),
            # the server generated tokens, and nothing of them showed (no content event)
            no_output=status == "ok" and not times and bool(self._usage_out),
            session_id=meta.session_id,
            step=meta.step,
            send_s=None if self._sent_at is None else self._sent_at - t0,
            unknown_events=self._unknown,
            images=meta.images,
            inputs=meta.inputs,
        )

    def _reasoning_tokens(self) -> int | None:
        """Reasoning tokens: the server's usage detail, else counted (the tokenizer's count
        of the reasoning text, or a stream's reasoning events); None when uncountable (a
        sync body with reasoning text, no tokenizer and no detail)."""
        if self._usage_reasoning is not None:
            return self._usage_reasoning
        if not self._reasoning_at:
            return 0
        if self._tokenizer is not None:
            return self._tokenizer(self.reasoning_text)
        return None if self._sync else len(self._reasoning_at)

    def _stream_end(self, transport_status: str | None) -> StreamEnd | None:
        """How a stream's body ended (``stream_end``): None when sync or cut by the transport."""
        if self._sync or self._error_body is not None:
            return None
        if self._done:
            return "done"
        return "eof" if transport_status in (None, "ok") else None

    def _status(self, status: str | None, error: str | None) -> tuple[str, str | None]:
        if status is not None:
            if status == "ok":
                return status, error
            if status in TRANSPORT_STATUSES or status == "protocol":
                return status, _clip(error) if error else status
            raise ValueError(f"unknown status {status!r}")
        code = self._http_status
        if code is not None and code >= 400:
            if code == OVERLOADED_HTTP:
                return "overloaded", self._http_error(code)
            if code < 500 and is_context_overflow(
                bytes(self._error_body or b"").decode("utf-8", "replace")
            ):
                return "context_overflow", self._http_error(code)
            return ("http_4xx" if code < 500 else "http_5xx"), self._http_error(code)
        if self._protocol_error is not None:
            return self._error_class, _clip(self._protocol_error)
        if not self._sync and self._last_event_at is None and self._head.strip():
            if self._parser.comments == 0:
                head = self._head.decode("utf-8", "replace")
                return "protocol", _clip(f"response is not an SSE stream: {head!r}")
        if not self._done:
            if not self._sync and self._finish_reason is not None:
                return "ok", None  # finish_reason, then a clean end of body: a complete answer
            marker = getattr(self._adapter, "end_marker", "the end-of-stream marker")
            if self._sync:
                return "disconnect", f"body ended without {marker}"
            return "disconnect", f"stream ended before a finish_reason or {marker}"
        return "ok", None

    def _http_error(self, code: int) -> str:
        body = bytes(self._error_body or b"")
        message: str | None = None
        try:
            message = self._adapter.parse_body(body).error
        except _PARSE_ERRORS:
            message = None
        if message is None:
            message = _generic_error(body)
        return _clip(f"HTTP {code}: {message}" if message else f"HTTP {code}")

    def _tokens_per_event(self, output_tokens: int | None, source: TokenSource) -> list[int]:
        """Tokens carried by each content event, when they can be known."""
        n = len(self._times)
        if self._sync:
            return [output_tokens] if n and output_tokens else []
        if n == 0:
            return []
        if self._tokenizer is not None:
            tok = self._tokenizer
            return [tok(piece) for piece in self._pieces]
        if self._usage_at and len(self._usage_at) == n:  # cumulative usage on every event
            out, prev = [], 0
            for i in range(n):
                out.append(self._usage_at[i] - prev)
                prev = self._usage_at[i]
            return out
        if source == "events" or output_tokens == n:
            return [1] * n
        return []


def _generic_error(body: bytes) -> str:
    """A readable message from a non-OpenAI error body (FastAPI ``detail``, plain text)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return text
    if isinstance(obj, dict):
        for key in ("error", "detail", "message"):
            if obj.get(key):
                value = obj[key]
                if isinstance(value, dict):
                    return str(value.get("message") or value)
                return str(value)
    return text


def _clip(text: str) -> str:
    return text if len(text) <= _ERROR_TEXT_LIMIT else text[: _ERROR_TEXT_LIMIT - 1] + "…"
