"""Serving the app: the socket, uvicorn's configuration, and the one in-thread starter.

``python -m llmload.target_server`` (``__main__``) serves with ``bind`` + ``uvicorn_config``;
benchmarks and tests that want the server inside their own process (to read its
registry, count its tasks, or inject an engine) use ``start_server_thread`` —
the same configuration, on a daemon thread with its own event loop.  Out of
process, ``target_server.launch`` is the one launcher.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI

from llmload.target_server.app import build_app
from llmload.target_server.engine import Engine, build_engine
from llmload.target_server.launch import wait_healthy
from llmload.target_server.read_deadline import http_protocol
from llmload.target_server.settings import Settings
from llmload.target_server.state import ServerState

#: the listen backlog the server asks for (the kernel caps it at net.core.somaxconn)
BACKLOG = 2048


def bind(host: str, port: int, reuse_port: bool = False, listen: bool = True) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0 = any free port), listening unless told not.

    ``reuse_port``: ``SO_REUSEPORT``, so several processes can each listen on the same
    port and the kernel spreads new connections over them (``--workers``); a socket
    bound that way without ``listen`` only holds the port.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if not listen:
        return sock
    sock.listen(BACKLOG)
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://host:port`` for a bound socket."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def uvicorn_config(app: Any, settings: Settings, **overrides: Any) -> uvicorn.Config:
    """How the bundled server runs under uvicorn (its write and read deadlines, JSON 400s)."""
    options: dict[str, Any] = {
        "loop": settings.loop,
        "http": http_protocol(
            settings.send_timeout, settings.client_header_timeout, settings.client_body_timeout
        ),
        "log_config": None,
        "access_log": False,
        "timeout_keep_alive": 30,
        "timeout_graceful_shutdown": 5,
        "backlog": BACKLOG,
    }
    return uvicorn.Config(app, **{**options, **overrides})


@dataclass
class ThreadedServer:
    """A running server: ``url`` (``http://127.0.0.1:PORT``), ``app``, ``engine``, ``settings``.

    ``state`` is the app's ``ServerState`` (``state.metrics.registry`` holds the
    ``llmserve_*`` metrics, ``state.admission`` the running/waiting counts).
    ``stop()`` shuts it down (idempotent); open streams get 2 s to finish.
    """

    url: str
    app: FastAPI
    engine: Engine
    settings: Settings
    server: uvicorn.Server
    thread: threading.Thread
    loop: asyncio.AbstractEventLoop
    stopped: bool = field(default=False)

    @property
    def state(self) -> ServerState:
        """The app's shared state (metrics, admission)."""
        return self.app.state.server

    def metric(self, name: str, **labels: str) -> float:
        """One sample from the app's registry (0.0 when absent)."""
        value = self.state.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def total_requests(self) -> int:
        """Every request counted in ``llmserve_requests_total``, whatever its labels."""
        return int(
            sum(
                s.value
                for m in self.state.metrics.registry.collect()
                if m.name == "llmserve_requests"
                for s in m.samples
                if s.name == "llmserve_requests_total"
            )
        )

    def tasks(self) -> int:
        """asyncio tasks alive on the server's event loop."""

        async def count() -> int:
            return len(asyncio.all_tasks())

        return asyncio.run_coroutine_threadsafe(count(), self.loop).result(10)

    def stop(self, timeout: float = 10.0) -> None:
        """Shut down and join the server thread."""
        if self.stopped:
            return
        self.stopped = True
        self.server.should_exit = True
        self.thread.join(timeout=timeout)

    def __enter__(self) -> ThreadedServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_server_thread(
    settings: Settings | None = None,
    ready_timeout: float = 120.0,
    engine: Engine | None = None,
    wait_ready: bool = True,
    **overrides: Any,
) -> ThreadedServer:
    """Build engine + app from ``settings`` (default ``Settings()``) with ``overrides``,
    serve it on 127.0.0.1 with an ephemeral port in a daemon thread, and return
    once ``/health`` answers 200 (``TimeoutError`` after ``ready_timeout`` s).

    Any ``Settings`` field can be overridden: ``engine="synthetic"``,
    ``ttft_ms=50``, ``itl_ms=10``, ``fail_rate=1.0``, ``api_key="k"``,
    ``max_concurrency=2``, ``max_queue=0``, ``request_timeout=1.0``, ...
    ``engine`` injects a ready-made engine instead of ``build_engine(settings)``;
    ``wait_ready=False`` returns once the socket accepts (``/health`` may still be 503).
    """
    base = settings or Settings()
    settings = base.with_overrides(host="127.0.0.1", port=0, **overrides)
    engine = engine if engine is not None else build_engine(settings)
    app = build_app(engine, settings)
    sock = bind("127.0.0.1", 0)
    config = uvicorn_config(
        app,
        settings,
        log_config=uvicorn.config.LOGGING_CONFIG,
        log_level="warning",
        timeout_graceful_shutdown=2,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    factory = config.get_loop_factory()  # "auto": uvloop when installed, as under server.run()
    loop = factory() if factory is not None else asyncio.new_event_loop()
    thread = threading.Thread(
        target=loop.run_until_complete,
        args=(server.serve(sockets=[sock]),),
        name=f"llmserve-{sock.getsockname()[1]}",
        daemon=True,
    )
    thread.start()
    handle = ThreadedServer(url_of(sock), app, engine, settings, server, thread, loop)
    try:
        if wait_ready:
            alive = lambda: thread.is_alive() and not handle.state.start_error  # noqa: E731 - a one-line helper local to this function
            wait_healthy(handle.url, ready_timeout, alive=alive)
        else:
            wait_started(server, ready_timeout)
    except BaseException:
        handle.stop()
        raise
    return handle


def wait_started(server: uvicorn.Server, timeout: float) -> None:
    """Wait until uvicorn accepts connections (engine possibly still loading)."""
    deadline = time.monotonic() + timeout
    while not server.started:
        if time.monotonic() > deadline:
            raise TimeoutError(f"uvicorn did not start within {timeout} s")
        time.sleep(0.01)
