"""Per-app state and per-request bookkeeping: metrics and the log line, exactly once."""

from __future__ import annotations

import asyncio
import json
import logging
from time import perf_counter

from llmload.target_server.admission import Admission
from llmload.target_server.engine import Engine
from llmload.target_server.metrics import ServerMetrics
from llmload.target_server.nvmlgauges import DeviceGauges
from llmload.target_server.responses_api import ResponseStore
from llmload.target_server.settings import Settings

log = logging.getLogger("llmload.target_server.requests")


class RequestContext:
    """What happened to one request (mutable while it runs, finished once)."""

    __slots__ = (
        "request_id",
        "endpoint",
        "stream",
        "arrival",
        "admitted",
        "first",
        "last",
        "end",
        "prompt_tokens",
        "output_tokens",
        "reasoning_tokens",
        "status",
        "http_status",
        "finish_reason",
        "fault",
        "finished",
        "admitted_ok",
        "itl_max",
        "cached_tokens",
    )

    def __init__(self, request_id: str, endpoint: str, arrival: float):
        self.request_id = request_id
        self.endpoint = endpoint
        self.stream = False
        self.arrival = arrival
        self.admitted: float | None = None
        self.first: float | None = None
        self.last: float | None = None
        self.end: float | None = None
        self.prompt_tokens = 0
        self.output_tokens = 0
        self.reasoning_tokens = 0
        self.status: str | None = None
        self.http_status = 200
        self.finish_reason: str | None = None
        self.fault: str | None = None
        self.finished = False
        self.admitted_ok = False
        self.itl_max: float | None = None
        #: prompt tokens the engine's prefix cache served (None: it has none)
        self.cached_tokens: int | None = None

    def timings(self, now: float | None = None) -> dict[str, float | None]:
        """The ``x_llmload`` extension: server-side seconds since arrival."""
        now = perf_counter() if now is None else now
        a = self.arrival
        return {
            "queue_s": None if self.admitted is None else round(self.admitted - a, 6),
            "ttft_s": None if self.first is None else round(self.first - a, 6),
            "e2e_s": round(now - a, 6),
            "itl_max_s": None if self.itl_max is None else round(self.itl_max, 6),
        }


class ServerState:
    """Everything the handlers share: engine, settings, metrics, admission, and the
    Responses API's stored conversations (``previous_response_id``)."""

    def __init__(self, engine: Engine, settings: Settings):
        self.engine = engine
        self.settings = settings
        self.model_name: str = settings.model_name or engine.model_name
        self.admission = Admission(settings.max_concurrency, settings.max_queue)
        self.metrics = ServerMetrics(self._gauges)
        self.start_error: str | None = None
        self.responses = ResponseStore()
        #: the engine's GPU(s) read through NVML for /metrics, once the engine is ready
        self.gpu: DeviceGauges | None = None
        self._gpu_asked = False
        self._gpu_lock = asyncio.Lock()

    async def open_gpu(self) -> None:
        """Once the engine is ready, and once only: its GPU(s)' NVML gauges for ``/metrics``
        (``target_server.nvmlgauges``; NVML's start can take a while: off the event loop).
        Called when the engine is ready and by the first scrape after, whichever comes first,
        so no scrape after ``/health`` says ready misses them."""
        if self._gpu_asked or not self.engine.ready:
            return
        async with self._gpu_lock:
            if not self._gpu_asked:
                self.gpu = await asyncio.to_thread(DeviceGauges.open, self.engine)
                self._gpu_asked = True

    def _gauges(self) -> dict[str, tuple[str, float]]:
        out = {
            "llmserve_requests_running": (
                "Requests holding a generation slot.",
                float(self.admission.running),
            ),
            "llmserve_requests_waiting": (
                "Requests queued for a slot.",
                float(self.admission.waiting),
            ),
            "llmserve_engine_ready": ("1 once the engine has loaded.", float(self.engine.ready)),
        }
        extra = getattr(self.engine, "extra_metrics", None)
        for key, value in (extra() if extra else {}).items():
            name = key if key.startswith("llmserve_") else "llmserve_" + key
            out[name] = (f"Engine gauge {key}.", float(value))
        return out

    def finish(self, ctx: RequestContext) -> None:
        """Count the request, observe its histograms and log it: once per request."""
        if ctx.finished:
            return
        ctx.finished = True
        end = ctx.end if ctx.end is not None else perf_counter()
        status = ctx.status or "error"
        m, ep = self.metrics, ctx.endpoint
        m.requests.labels(ep, "true" if ctx.stream else "false", status).inc()
        if ctx.admitted_ok:
            ttft, _itl, e2e, queue, decode = m.labels(ep, ctx.stream)
            assert ctx.admitted is not None
            queue.observe(ctx.admitted - ctx.arrival)
            m.prompt_tokens.labels(ep).inc(ctx.prompt_tokens)
            m.output_tokens.labels(ep).inc(ctx.output_tokens)
            if ctx.cached_tokens is not None:
                m.prefix_queries.labels(ep).inc(ctx.prompt_tokens)
                m.prefix_hits.labels(ep).inc(ctx.cached_tokens)
            if ctx.first is not None:
                ttft.observe(ctx.first - ctx.arrival)
            if status in ("ok", "stall", "malformed"):
                e2e.observe(end - ctx.arrival)
                if ctx.first is not None and ctx.last is not None and ctx.last > ctx.first:
                    decode.observe((ctx.output_tokens - 1) / (ctx.last - ctx.first))
        if log.isEnabledFor(logging.INFO):
            t = ctx.timings(end)
            log.info(
                json.dumps(
                    {
                        "id": ctx.request_id,
                        "endpoint": ep,
                        "stream": ctx.stream,
                        "status": status,
                        "http_status": ctx.http_status,
                        "prompt_tokens": ctx.prompt_tokens,
                        "output_tokens": ctx.output_tokens,
                        "cached_tokens": ctx.cached_tokens,
                        "finish_reason": ctx.finish_reason,
                        **t,
                    }
                )
            )
