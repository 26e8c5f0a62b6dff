"""The app factory: ``build_app(engine, settings) -> FastAPI``, one handler per endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from importlib import metadata
from time import perf_counter
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response

from llmload.target_server.admission import Rejected
from llmload.target_server.engine import (
    Engine,
    EngineInputError,
    GenerationRequest,
    PreparedRequest,
    engine_fault,
)
from llmload.target_server.errors import ERROR_KINDS, ApiError
from llmload.target_server.generation import RAW_SEND, DropInjectedDisconnectLogs, GenerationCall
from llmload.target_server.pooling import (
    EMBEDDINGS,
    POOLING_ENDPOINTS,
    answer,
    parse_pooling,
    pooled_texts,
)
from llmload.target_server.read_deadline import BODY_TIMED_OUT
from llmload.target_server.schemas import (
    CHAT,
    COMPLETIONS,
    GENERATION_ENDPOINTS,
    MESSAGES,
    RESPONSES,
    ParsedRequest,
    decode_json,
    parse_request,
    validation_error,
)
from llmload.target_server.settings import MAX_BODY_BYTES, Settings
from llmload.target_server.state import RequestContext, ServerState
from llmload.target_server.write_deadline import ARRIVED, CHUNK_WRITER

log = logging.getLogger("llmload.target_server")


def server_version() -> str:
    """The installed llmload's version ("unknown" in a tree that is not installed)."""
    try:
        return metadata.version("llmload")
    except metadata.PackageNotFoundError:
        return "unknown"


def _too_large() -> ApiError:
    return ApiError(413, f"request body over {MAX_BODY_BYTES} bytes", code="request_too_large")


async def _read_body(request: Request) -> bytes:
    """The request body, refusing more than ``MAX_BODY_BYTES`` (header and bytes read)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _too_large()
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _too_large()
        chunks.append(chunk)
    return b"".join(chunks)


def _check_key(request: Request, key: str | None) -> None:
    """``Authorization: Bearer KEY``, or Anthropic's ``x-api-key: KEY``."""
    if key is None:
        return
    auth = request.headers.get("authorization", "")
    scheme, _, given = auth.partition(" ")
    if scheme.lower() != "bearer":
        given = request.headers.get("x-api-key", "")
    if not hmac.compare_digest(given.strip().encode(), key.encode()):
        raise ApiError(401, "missing or invalid API key", code="invalid_api_key")


#: endpoint -> the prefix of its request ids (as the real APIs spell theirs)
_ID_PREFIX = {CHAT: "chatcmpl-", COMPLETIONS: "cmpl-", RESPONSES: "resp_", MESSAGES: "msg_"}


def _continued(state: ServerState, parsed: ParsedRequest) -> ParsedRequest:
    """A Responses request with ``previous_response_id``: the stored conversation, then
    this request's input (its instructions first, as they are not carried over)."""
    prior = state.responses.get(parsed.previous_response_id or "")
    if prior is None:
        msg = f"previous response {parsed.previous_response_id!r} not found"
        raise ApiError(400, msg, param="previous_response_id", code="previous_response_not_found")
    gen = parsed.generation
    new = gen.messages or []
    system = [m for m in new if m.get("role") == "system"]
    turns = [m for m in new if m.get("role") != "system"]
    return replace(parsed, generation=replace(gen, messages=[*system, *prior, *turns]))


def _prepare(state: ServerState, gen: GenerationRequest) -> PreparedRequest:
    """``engine.prepare`` with its failures as OpenAI errors (400 for input, 500 for bugs)."""
    try:
        return state.engine.prepare(gen)
    except EngineInputError as exc:
        raise ApiError(400, str(exc), param=exc.param, code=exc.code) from None
    except Exception as exc:
        log.exception("request %s: engine.prepare failed", gen.request_id)
        raise ApiError(500, f"engine failure: {exc}", code="engine_error") from None


async def _generation(state: ServerState, request: Request, endpoint: str) -> Response:
    """Validate a generation request; the returned response runs the generation."""
    prefix = _ID_PREFIX[endpoint]
    arrived = request.scope.get(ARRIVED) or perf_counter()  # stamped by the protocol
    ctx = RequestContext(prefix + uuid.uuid4().hex[:24], endpoint, arrived)
    try:
        _check_key(request, state.settings.api_key)
        obj = decode_json(await _read_body(request))
        ctx.stream = obj.get("stream") is True
        if not state.engine.ready:
            if fault := engine_fault(state.engine):
                raise ApiError(503, f"the engine failed: {fault}", code="engine_failed")
            raise ApiError(503, "the engine is still loading", code="engine_not_ready")
        parsed = parse_request(
            endpoint, obj, ctx.request_id, state.model_name, state.engine.max_output_tokens
        )
        if parsed.previous_response_id is not None:
            parsed = _continued(state, parsed)
        prepared = _prepare(state, parsed.generation)
        ctx.prompt_tokens = prepared.prompt_tokens
        room = state.engine.max_context - prepared.prompt_tokens
        if room < 1:
            msg = (
                f"the prompt has {prepared.prompt_tokens} tokens; "
                f"the context holds {state.engine.max_context}"
            )
            raise ApiError(
                400,
                msg,
                param="prompt" if parsed.generation.prompt is not None else "messages",
                code="context_length_exceeded",
            )
        gen = parsed.generation
        if gen.max_tokens > room:
            if not parsed.max_tokens_defaulted or gen.min_tokens > room:
                msg = (
                    f"prompt ({prepared.prompt_tokens}) + max_tokens ({gen.max_tokens}) "
                    f"exceeds the context ({state.engine.max_context} tokens)"
                )
                raise ApiError(400, msg, param="max_tokens", code="context_length_exceeded")
            # max_tokens was not asked for: generate what still fits (as vLLM does)
            parsed = replace(parsed, generation=replace(gen, max_tokens=room))
            prepared = _prepare(state, parsed.generation)
    except ApiError as err:
        ctx.status, ctx.http_status = err.label, err.status
        state.finish(ctx)
        return err.response(anthropic=endpoint == MESSAGES)
    except ClientDisconnect:  # gone while we read the body: nobody to answer
        ctx.status, ctx.http_status = "cancelled", 499
        if request.scope.get(BODY_TIMED_OUT):  # dropped by us: the 408 went out already
            ctx.status, ctx.http_status = ERROR_KINDS[408][1], 408
        state.finish(ctx)
        return Response(status_code=ctx.http_status)
    except Exception:  # a validator that raised instead of reporting: a bug, but answered
        log.exception("request %s: reading the request failed", ctx.request_id)
        bug = ApiError(500, "internal error while reading the request", code="internal_error")
        ctx.status, ctx.http_status = bug.label, bug.status
        state.finish(ctx)
        return bug.response(anthropic=endpoint == MESSAGES)
    return GenerationCall(state, ctx, parsed, prepared)


async def _pooling(state: ServerState, request: Request, endpoint: str) -> Response:
    """An embeddings or rerank request (``target_server.pooling``): validated, admitted like
    a generation, held for the engine's stated time, answered as one JSON body."""
    arrived = request.scope.get(ARRIVED) or perf_counter()
    prefix = "embd-" if endpoint == EMBEDDINGS else "rerank-"
    ctx = RequestContext(prefix + uuid.uuid4().hex[:24], endpoint, arrived)
    settings = state.settings
    try:
        _check_key(request, settings.api_key)
        obj = decode_json(await _read_body(request))
        engine = state.engine
        if not engine.ready:
            raise ApiError(503, "the engine is still loading", code="engine_not_ready")
        pool = getattr(engine, "pool", None)
        if pool is None:
            msg = f"the {engine.name} engine serves no {endpoint}: start with --engine synthetic"
            raise ApiError(404, msg, code="not_supported")
        job = parse_pooling(endpoint, obj, state.model_name)
        tokens, seconds = pool(pooled_texts(job))
        longest = max(tokens)
        if longest > engine.max_context:
            msg = f"an input has {longest} tokens; the context holds {engine.max_context}"
            raise ApiError(400, msg, param="input", code="context_length_exceeded")
        ctx.prompt_tokens = sum(tokens)
        async with asyncio.timeout(settings.request_timeout or None):
            try:
                await state.admission.acquire()
            except Rejected:
                msg = "the server is at capacity: too many requests waiting"
                raise ApiError(
                    429, msg, code="rate_limit_exceeded", headers={"Retry-After": "1"}
                ) from None
            try:
                ctx.admitted, ctx.admitted_ok = perf_counter(), True
                done = ctx.admitted + seconds
                while (left := done - perf_counter()) > 0:  # never early (a timer may be)
                    await asyncio.sleep(left)
            finally:
                state.admission.release()
        ctx.status = "ok"
        body = answer(job, ctx.prompt_tokens, settings.embedding_dim, ctx.timings())
    except ApiError as err:
        ctx.status, ctx.http_status = err.label, err.status
        state.finish(ctx)
        return err.response()
    except TimeoutError:
        late = ApiError(504, f"request timed out after {settings.request_timeout:g} s")
        ctx.status, ctx.http_status = late.label, late.status
        state.finish(ctx)
        return late.response()
    except ClientDisconnect:
        ctx.status, ctx.http_status = "cancelled", 499
        state.finish(ctx)
        return Response(status_code=499)
    ctx.end = perf_counter()
    state.finish(ctx)
    return JSONResponse(body)


class _ServerApp(FastAPI):
    """FastAPI that leaves the server's own ``send`` in the scope for streamed bodies, and
    serves the generation endpoints before its middleware stack (``direct``).

    A ``POST`` to chat/completions goes straight to its handler: the handler answers
    every failure itself (``_generation`` turns each into an OpenAI error), so the
    framework's routing, middleware and exception wrappers (their share of the CPU at
    1,000 streams: ``docs/scale.md``, *The bundled server*, "Tokens written from the
    tick") add nothing there.  Everything else (other methods, other paths, a
    ``root_path`` prefix) is FastAPI's as before.
    """

    direct: dict[str, Callable[[Any, Any, Any], Awaitable[None]]]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        scope[RAW_SEND] = send
        try:
            handler = None
            if scope["method"] == "POST" and not scope.get("root_path"):
                handler = self.direct.get(scope["path"])
            await (handler or super().__call__)(scope, receive, send)
        finally:
            # Both hold uvicorn's cycle, which holds the scope: left in, every request
            # would end as a reference cycle that only a full collection frees
            # (~20 objects per request, and full collections scanning all of them).
            scope.pop(RAW_SEND, None)
            scope.pop(CHUNK_WRITER, None)


def build_app(engine: Engine, settings: Settings) -> FastAPI:
    """The server app around a (not yet started) engine; the lifespan starts it."""
    state = ServerState(engine, settings)
    uv_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, DropInjectedDisconnectLogs) for f in uv_log.filters):
        uv_log.addFilter(DropInjectedDisconnectLogs())

    async def start_engine() -> None:
        try:
            await engine.start()
            log.info("engine %s ready (model %s)", engine.name, state.model_name)
        except Exception as exc:
            state.start_error = f"{type(exc).__name__}: {exc}"
            log.exception("engine %s failed to start", engine.name)
            return
        await state.open_gpu()  # its GPU(s) on /metrics, said in the log now

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.engine_task = asyncio.create_task(start_engine())
        try:
            yield
        finally:
            app.state.engine_task.cancel()
            await asyncio.gather(app.state.engine_task, return_exceptions=True)
            await engine.stop()

    app = _ServerApp(
        title="llmload target server",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.server = state
    app.state.engine = engine
    app.state.settings = settings

    def direct(endpoint: str) -> Callable[[Any, Any, Any], Awaitable[None]]:
        async def serve(scope: Any, receive: Any, send: Any) -> None:
            scope["app"] = app
            response = await _generation(state, Request(scope, receive), endpoint)
            await response(scope, receive, send)

        return serve

    app.direct = {endpoint: direct(endpoint) for endpoint in GENERATION_ENDPOINTS}

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> Response:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> Response:
        return validation_error(exc).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> Response:
        return ApiError(
            exc.status_code, str(exc.detail), headers=dict(exc.headers or {})
        ).response()

    def route(
        handler: Callable[[ServerState, Request, str], Awaitable[Response]], endpoint: str
    ) -> Callable[[Request], Awaitable[Response]]:
        """The framework's route to an endpoint (what ``direct`` does not serve: a
        ``root_path`` prefix)."""

        async def serve(request: Request) -> Response:
            return await handler(state, request, endpoint)

        return serve

    for endpoint in GENERATION_ENDPOINTS:
        app.post(endpoint)(route(_generation, endpoint))
    for endpoint in POOLING_ENDPOINTS:
        app.post(endpoint)(route(_pooling, endpoint))

    @app.get("/v1/models")
    async def models(request: Request) -> Any:
        _check_key(request, settings.api_key)
        card = {
            "id": state.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "llmload",
            "max_model_len": engine.max_context,
        }
        return {"object": "list", "data": [card]}

    @app.get("/version")
    async def version() -> Any:
        # as vLLM's /version: a client records which server build it measured
        return {"version": server_version(), "server": "llmload"}

    @app.get("/health")
    async def health() -> Response:
        if engine.ready:
            return JSONResponse({"status": "ok", "engine": engine.name, "model": state.model_name})
        error = state.start_error or engine_fault(engine)
        body = {"status": "failed" if error else "starting", "error": error}
        return JSONResponse(body, status_code=503)

    @app.get("/metrics")
    async def metrics() -> Response:
        body = state.metrics.render()
        await state.open_gpu()  # a scrape right after /health said ready, before start_engine did
        if state.gpu is not None:  # NVML reads take ms: on a worker thread
            body += await asyncio.to_thread(state.gpu.render)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    if settings.ui == "gradio":
        from llmload.target_server.ui import mount

        mount(app, engine, settings)
    return app
