"""Running one generation as an ASGI response: admission, SSE or JSON body, cancellation.

``GenerationCall`` is returned by the chat/completions handlers once the
request is parsed and validated.  It runs the generation in the request's own
task while a watcher task waits for ``http.disconnect``; when the client goes
away first the request task is cancelled at once (its slot is freed, the engine
iterator is ``aclose``d, the request counts as ``cancelled``).  A client that
stops reading is dropped by the connection's write deadline
(``target_server.write_deadline``, ``--send-timeout``), which ends the same way.

Per token, two paths.  A ``TimetableEngine`` (``engine.is_timetable_engine``; the
synthetic one: every token's due time known in advance) is streamed from the
pacer's tick (``_Ticker``): the tick that a token is due in encodes it and writes
it straight to the connection (``write_deadline.ChunkWriter``), so the request's
task sleeps from the first token to the last — no task wake-up, no coroutine chain
through the framework, no ASGI message per token.  A piece the tick cannot write (a fault to act
out, a client that is not reading, one that left) goes back to the task and out
through ``send``.  Other engines yield pieces from an async iterator and each goes
out through the server's own ``send`` (past the framework's wrappers:
``RAW_SEND``).  Either way a content event is stamped as it is handed to the socket
and its gap observed in the ITL histogram at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from time import perf_counter
from typing import Any

from starlette.responses import Response

from llmload.target_server.admission import Rejected
from llmload.target_server.chunks import ChunkEncoder, Encoder, json_string
from llmload.target_server.engine import (
    PreparedRequest,
    Timetable,
    TokenPiece,
    is_timetable_engine,
)
from llmload.target_server.errors import ApiError
from llmload.target_server.messages_api import MessagesEncoder
from llmload.target_server.pacer import Pacer
from llmload.target_server.responses_api import ResponsesEncoder, history_of
from llmload.target_server.schemas import MESSAGES, RESPONSES, ParsedRequest
from llmload.target_server.state import RequestContext, ServerState
from llmload.target_server.write_deadline import CHUNK_WRITER, ChunkWriter

log = logging.getLogger("llmload.target_server")

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


#: scope key under which the app (``target_server.app``) leaves the server's own ``send``:
#: a stream's body chunks skip the framework's per-message wrappers (they only watch
#: ``http.response.start``, which still goes through them; what that saves per event:
#: ``docs/scale.md``, *The bundled server*, "Body chunks past the framework's wrappers")
RAW_SEND = "llmload.raw_send"


class InjectedDisconnect(Exception):
    """Raised on purpose so that uvicorn drops the connection (``--disconnect-rate``)."""


class DropInjectedDisconnectLogs(logging.Filter):
    """Keeps uvicorn's 'Exception in ASGI application' quiet for injected disconnects."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, InjectedDisconnect)


def _chunk(body: bytes, more: bool = True) -> dict[str, Any]:
    return {"type": "http.response.body", "body": body, "more_body": more}


class _Tally:
    """A generation's token count and content-event times; each gap observed as it happens."""

    __slots__ = ("ctx", "itl", "n", "reasoning", "last", "mx")

    def __init__(self, ctx: RequestContext, itl: Any):
        self.ctx, self.itl = ctx, itl
        self.n, self.mx = 0, 0.0
        self.reasoning = 0  # pieces of reasoning among the n
        self.last: float | None = None

    def sent(self, t: float) -> None:
        """A content event was handed to the socket at ``t``."""
        last = self.last
        if last is None:
            self.ctx.first = t
        else:
            gap = t - last
            self.itl.observe(gap)
            if gap > self.mx:
                self.mx = gap
        self.last = t

    def close(self) -> None:
        """Into the context: token count, last content time, largest gap."""
        ctx, n, last = self.ctx, self.n, self.last
        ctx.output_tokens, ctx.last = n, last
        ctx.reasoning_tokens = self.reasoning
        ctx.itl_max = self.mx if n > 1 and last is not None and last != ctx.first else None


class _Ticker:
    """One stream of a timetable, driven from the pacer's ticks (see the module docstring).

    ``await ticker.run()`` returns ``None`` when the stream has ended (``reason`` set if
    a piece carried one), or a piece the tick could not write, for the task to send
    itself; ``run()`` again carries on after it.
    """

    __slots__ = (
        "table",
        "write",
        "call_at",
        "prefix",
        "suffix",
        "tally",
        "waiter",
        "piece",
        "exact",
        "reason",
        "on_tick",
        "encode",
        "fast",
    )

    def __init__(
        self,
        table: Timetable,
        writer: ChunkWriter,
        pacer: Pacer,
        encoder: Encoder,
        tally: _Tally,
    ):
        self.table, self.write, self.call_at, self.tally = table, writer.write, pacer.call_at, tally
        self.on_tick: Callable[[], None] | None = self._due  # one bound method for every tick
        self.prefix, self.suffix = encoder.prefix, encoder.suffix
        # answer text as prefix + string + suffix (chat, completions), else through ``encode``
        self.fast = encoder.constant
        self.encode = encoder.piece  # any other piece (reasoning, a tool call, another API)
        self.waiter: asyncio.Future[TokenPiece | None] | None = None
        self.piece: TokenPiece | None = None
        self.exact = True  # the first piece: never before its deadline
        self.reason: str | None = None

    def run(self) -> asyncio.Future[TokenPiece | None]:
        """Stream until the end or a piece to hand back (what the future resolves to)."""
        self.waiter = asyncio.get_running_loop().create_future()
        self._go(None)
        return self.waiter

    def stop(self) -> None:
        """No more ticks for this stream (a tick already armed finds it stopped)."""
        if self.waiter is not None and not self.waiter.done():
            self.waiter.cancel()
        # self -> bound method -> self: left set, the ticker and all it holds (writer,
        # tally, table) would outlive the request as a cycle only a full collection frees
        self.on_tick = None

    def _due(self) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():
            return  # stopped: the task was cancelled (client gone) or ended
        piece, self.piece = self.piece, None
        self._go(piece)

    def _go(self, piece: TokenPiece | None) -> None:
        waiter, on_tick = self.waiter, self.on_tick
        assert waiter is not None and on_tick is not None  # live: no run or tick after stop()
        try:
            if piece is not None and not self._emit(piece, waiter):
                return
            for deadline, nxt in self.table:  # every piece already due goes out now
                exact, self.exact = self.exact, False
                if deadline > (now := perf_counter()):
                    self.piece = nxt
                    self.call_at(deadline, on_tick, exact, now)
                    return
                if not self._emit(nxt, waiter):
                    return
            waiter.set_result(None)  # the engine ended without a finish reason
        except Exception as exc:
            if not waiter.done():
                waiter.set_exception(exc)

    def _emit(self, piece: TokenPiece, waiter: asyncio.Future[TokenPiece | None]) -> bool:
        """Write one piece; False when the stream stops here (ended, or handed back)."""
        if piece.fault is not None:
            waiter.set_result(piece)
            return False
        text, tally = piece.text, self.tally
        if text:
            t = perf_counter()
            if piece.kind == "content" and self.fast:
                data = self.prefix + json_string(text) + self.suffix
            else:
                data = self.encode(piece)
                tally.reasoning += piece.kind == "reasoning"
            if not self.write(data):
                waiter.set_result(piece)
                return False
            tally.sent(t)
        tally.n += 1
        if piece.finish_reason is not None:
            self.reason = piece.finish_reason
            waiter.set_result(None)
            return False
        return True


def encoder_for(state: ServerState, ctx: RequestContext, parsed: ParsedRequest) -> Encoder:
    """The encoder of the request's API (``chunks.Encoder``)."""
    if parsed.endpoint == RESPONSES:
        gen = parsed.generation
        return ResponsesEncoder(
            ctx.request_id,
            parsed.model,
            history_of(gen.messages),
            state.responses if parsed.store else None,
            parsed.previous_response_id,
            gen.max_tokens,
        )
    if parsed.endpoint == MESSAGES:
        return MessagesEncoder(ctx.request_id, parsed.model)
    return ChunkEncoder(parsed.endpoint, ctx.request_id, parsed.model, parsed.include_usage)


class GenerationCall(Response):
    """The ASGI response of one admitted-or-queued generation request."""

    def __init__(
        self,
        state: ServerState,
        ctx: RequestContext,
        parsed: ParsedRequest,
        prepared: PreparedRequest,
    ):
        super().__init__()
        self.state = state
        self.ctx = ctx
        self.parsed = parsed
        self.prepared = prepared
        self.encoder = encoder_for(state, ctx, parsed)
        self.headers_sent = False
        self.client_gone = False
        self.finished = False
        self.body_send: Any = None
        self.writer: ChunkWriter | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # The generation runs in this task (no extra hop before admission); a watcher
        # task cancels it the moment the client disconnects.
        task = asyncio.current_task()
        assert task is not None
        self.body_send = scope.get(RAW_SEND, send)
        self.writer = scope.get(CHUNK_WRITER)
        watch = asyncio.ensure_future(self._watch(receive, task))
        try:
            await self._run(send)  # InjectedDisconnect propagates: uvicorn drops the connection
        except asyncio.CancelledError:
            if not self.client_gone:
                raise  # the server is shutting down
            task.uncancel()  # our own cancellation: the client is gone, nothing to answer
        finally:
            self.finished = True
            watch.cancel()

    async def _watch(self, receive: Any, task: asyncio.Task[Any]) -> None:
        while (await receive())["type"] != "http.disconnect":
            continue
        if not self.finished:
            self.client_gone = True
            self.ctx.status = self.ctx.status or "cancelled"
            task.cancel()

    async def _run(self, send: Any) -> None:
        ctx = self.ctx
        try:
            await self._admit_and_generate(send)
        except asyncio.CancelledError:
            ctx.status = ctx.status or "cancelled"
            raise
        except InjectedDisconnect:
            ctx.status = "disconnect"
            raise
        except Exception as exc:
            log.exception("request %s failed", ctx.request_id)
            ctx.status = "error"
            await self._fail(send, ApiError(500, f"internal error: {type(exc).__name__}: {exc}"))
        finally:
            ctx.end = perf_counter()
            self.state.finish(ctx)

    async def _admit_and_generate(self, send: Any) -> None:
        ctx, st = self.ctx, self.state
        timeout = st.settings.request_timeout
        deadline = None
        if timeout > 0:
            deadline = asyncio.get_running_loop().time() + timeout - (perf_counter() - ctx.arrival)
        limit = asyncio.timeout_at(deadline)
        try:
            async with limit:
                asked = perf_counter()
                try:
                    await st.admission.acquire()
                except Rejected:
                    ctx.status = "rejected"
                    msg = "the server is at capacity: too many requests waiting"
                    status = self.encoder.reject_status  # 429, or Anthropic's 529
                    code = "rate_limit_exceeded" if status == 429 else "overloaded"
                    err = ApiError(status, msg, code=code, headers={"Retry-After": "1"})
                    await self._fail(send, err)
                    return
                ctx.admitted = perf_counter()
                ctx.admitted_ok = True
                try:
                    engine = st.engine
                    # a timetable engine's pacer, when its ticks write the pieces: streamed only
                    ticks: Pacer | None = None
                    try:
                        if is_timetable_engine(engine):
                            if self.parsed.stream and self.writer:
                                ticks = engine.pacer
                            # the configured TTFT counts from the arrival (+ the wait for a slot)
                            since = ctx.arrival + (ctx.admitted - asked)
                            gen: Any = engine.timetable(self.prepared, since=since)
                            if ticks is None:
                                gen = engine.pacer.paced(gen)
                        else:
                            gen = engine.generate(self.prepared)
                    except Exception as exc:
                        ctx.status = "error"
                        await self._fail(
                            send, ApiError(500, f"engine failure: {exc}", code="engine_error")
                        )
                        return
                    if self.prepared.prefix is not None:  # the engine looked it up as it planned
                        ctx.cached_tokens = self.prepared.prefix.tokens
                    if self.parsed.stream:
                        await self._stream(gen, send, ticks)
                    else:
                        await self._body(gen, send)
                finally:
                    st.admission.release()
        except TimeoutError:
            if not limit.expired():
                raise  # an engine's own TimeoutError: an error, not our --request-timeout
            ctx.status = "timeout"
            await self._fail(
                send, ApiError(504, f"request timed out after {timeout:g} s", code="timeout")
            )

    async def _fail(self, send: Any, err: ApiError) -> None:
        # Counted before the answer goes out: a client that reads nothing may keep
        # that send waiting until the connection's write deadline drops it.
        ctx = self.ctx
        if not self.headers_sent:
            ctx.http_status = err.status
        ctx.end = perf_counter()
        self.state.finish(ctx)
        if self.headers_sent:  # mid-stream: an error event, then end without [DONE]
            await send(_chunk(self.encoder.error_event(err), more=False))
            return
        self.headers_sent = True
        body = self.encoder.error_payload(err)
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        headers += [(k.lower().encode(), v.encode()) for k, v in err.headers.items()]
        await send({"type": "http.response.start", "status": err.status, "headers": headers})
        await send(_chunk(body, more=False))

    def _complete(self, reason: str | None) -> dict[str, Any]:
        ctx = self.ctx
        ctx.finish_reason = reason or "stop"
        ctx.status = ctx.fault if ctx.fault in ("stall", "malformed") else "ok"
        return ctx.timings()

    async def _stream(self, gen: Any, send: Any, ticks: Pacer | None) -> None:
        """SSE: ``gen`` is the engine's async iterator, or its timetable when ``ticks`` (the
        engine's pacer, whose ticks then write the pieces) is given."""
        ctx, enc = self.ctx, self.encoder
        self.headers_sent = True
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        send = self.body_send or send
        if opening := enc.opening(ctx.prompt_tokens, ctx.cached_tokens):
            await send(_chunk(opening))
        prefix, suffix, jstr, encode = enc.prefix, enc.suffix, json_string, enc.piece
        fast = enc.constant
        msg = _chunk(b"")  # reused for every token: uvicorn reads it before send returns

        async def emit(piece: TokenPiece) -> None:
            if piece.kind == "content" and fast:
                msg["body"] = prefix + jstr(piece.text) + suffix
            else:
                msg["body"] = encode(piece)
            await send(msg)

        if ticks is not None:
            reason = await self._ticked(gen, ticks, send, emit)
        else:
            reason = await self._generate(gen, send, emit)
        n = ctx.output_tokens
        timings = self._complete(reason)
        assert ctx.finish_reason is not None
        reason, reasoning, cached = ctx.finish_reason, ctx.reasoning_tokens, ctx.cached_tokens
        tail = enc.closing(reason, ctx.prompt_tokens, n, timings, reasoning, cached)
        await send(_chunk(tail, more=False))

    async def _generate(
        self,
        gen: AsyncIterator[TokenPiece],
        send: Any,
        emit: Callable[[TokenPiece], Awaitable[None]],
    ) -> str | None:
        """Run the engine's pieces through ``emit``, timing each content piece as it goes out.

        Sets the context's token count, first/last content times and largest gap;
        returns the finish reason (None if the engine ended without one).
        """
        tally = self._tally()
        reason: str | None = None
        try:
            async for piece in gen:
                if await self._by_task(piece, tally, send, emit):
                    reason = piece.finish_reason
                    break
        finally:
            tally.close()
            await gen.aclose()  # type: ignore[attr-defined]  # an async generator's aclose, typed as AsyncIterator
        return reason

    async def _ticked(
        self,
        table: Timetable,
        pacer: Pacer,
        send: Any,
        emit: Callable[[TokenPiece], Awaitable[None]],
    ) -> str | None:
        """``_generate`` for a timetable: the pacer's ticks write the pieces (``_Ticker``);
        this task only sends what a tick hands back.  Returns the finish reason."""
        assert self.writer is not None
        tally = self._tally()
        ticker = _Ticker(table, self.writer, pacer, self.encoder, tally)
        try:
            while (piece := await ticker.run()) is not None:
                if await self._by_task(piece, tally, send, emit):
                    ticker.reason = piece.finish_reason
                    break
        finally:
            ticker.stop()
            tally.close()
            table.close()
        return ticker.reason

    def _tally(self) -> _Tally:
        ctx = self.ctx
        itl = self.state.metrics.itl.labels(ctx.endpoint, "true" if self.parsed.stream else "false")
        return _Tally(ctx, itl)

    async def _by_task(
        self,
        piece: TokenPiece,
        tally: _Tally,
        send: Any,
        emit: Callable[[TokenPiece], Awaitable[None]],
    ) -> bool:
        """One piece out through ``emit`` (its fault acted out first); True if it is the last."""
        if piece.fault is not None:
            await self._fault(piece.fault, send)
        tally.n += 1
        tally.reasoning += piece.kind == "reasoning"
        if piece.text:
            # stamped as the event is handed to the socket, not after the write returns: the
            # reader (a client or proxy on this host) can run and stamp its copy before this
            # process gets the CPU back, so a later stamp could exceed the client's own TTFT
            t = perf_counter()
            await emit(piece)
            tally.sent(t)
        return piece.finish_reason is not None

    async def _fault(self, fault: str, send: Any) -> None:
        self.ctx.fault = fault
        if fault == "malformed" and self.parsed.stream:
            await send(_chunk(self.encoder.malformed()))
        elif fault == "disconnect":
            if not self.headers_sent:  # non-stream: start a body, then drop it half-way
                self.headers_sent = True
                start = {"type": "http.response.start", "status": 200, "headers": []}
                await send({**start, "headers": [(b"content-type", b"application/json")]})
                await send(_chunk(b'{"id":"' + self.ctx.request_id.encode() + b'",'))
            raise InjectedDisconnect(self.ctx.request_id)

    async def _body(self, gen: AsyncIterator[TokenPiece], send: Any) -> None:
        ctx = self.ctx
        pieces: list[TokenPiece] = []

        async def emit(piece: TokenPiece) -> None:
            pieces.append(piece)

        reason = await self._generate(gen, send, emit)
        n = ctx.output_tokens
        timings = self._complete(reason)
        assert ctx.finish_reason is not None
        body = self.encoder.body(
            pieces, ctx.finish_reason, ctx.prompt_tokens, n, timings, ctx.cached_tokens
        )
        if ctx.fault == "malformed":
            body = body[:-1]  # complete HTTP message, broken JSON
        self.headers_sent = True
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send(_chunk(body, more=False))
