"""``llmload serve``: parse settings, build the engine and app, serve with uvicorn.

Once the socket accepts connections, one line goes to stderr::

    target_server: listening on http://127.0.0.1:PORT (engine synthetic, ...)

with the real port (``--port 0`` picks a free one).  ``/health`` answers 200
once the engine has loaded.  If the engine fails to load the process exits 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import signal
import socket
import sys
from collections.abc import Callable, Sequence

import uvicorn

from llmload.common import gcpolicy, limits
from llmload.target_server.app import build_app
from llmload.target_server.engine import build_engine
from llmload.target_server.serving import BACKLOG, bind, url_of, uvicorn_config
from llmload.target_server.settings import Settings, parse_settings

log = logging.getLogger("llmload.target_server")


async def serve(
    settings: Settings,
    sock: socket.socket | None = None,
    ready: Callable[[], object] | None = None,
) -> int:
    """Run until interrupted; 1 if the engine failed to build or start, or the port is taken.

    ``sock``/``ready``: a ``--workers`` process serves the socket it was given and calls
    ``ready`` instead of printing the listening line (its parent prints it once).
    """
    try:
        engine = build_engine(settings)
        app = build_app(engine, settings)
        sock = sock or bind(settings.host, settings.port)
    except Exception as exc:
        log.debug("startup failed", exc_info=True)
        print(f"target_server: error: {exc}", file=sys.stderr, flush=True)
        return 1
    config = uvicorn_config(app, settings)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    if task.done():
        task.result()
        return 1
    if ready is not None:
        ready()
    else:
        print(
            f"target_server: listening on {url_of(sock)} (engine {settings.engine}, "
            f"model {app.state.server.model_name})",
            file=sys.stderr,
            flush=True,
        )
    engine_task = app.state.engine_task
    await asyncio.wait((task, engine_task), return_when=asyncio.FIRST_COMPLETED)
    if engine_task.done() and app.state.server.start_error:
        print(f"target_server: engine failed: {app.state.server.start_error}", file=sys.stderr)
        server.should_exit = True
        await task
        return 1
    if engine_task.done():
        gcpolicy.settle()  # start-up is done: keep the collector out of the streams' timings
    await task
    return 0


def _host_limits() -> None:
    """Lift the soft fd limit to the hard one; say what of the host limits the streams."""
    for note in limits.server_notes(BACKLOG):
        print(f"target_server: note: {note}", file=sys.stderr, flush=True)


def _run(
    settings: Settings,
    sock: socket.socket | None = None,
    ready: Callable[[], object] | None = None,
) -> int:
    """``serve`` on the event loop ``--loop`` asks for."""
    if settings.loop == "uvloop" or settings.loop == "auto":
        try:
            import uvloop

            return uvloop.run(serve(settings, sock, ready))
        except ImportError:
            if settings.loop == "uvloop":
                raise
    return asyncio.run(serve(settings, sock, ready))


def _ended(pid: int) -> bool:
    """Has child ``pid`` exited (it stays waitable)?"""
    flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
    return os.waitid(os.P_PID, pid, flags) is not None


def _workers(settings: Settings) -> int:
    """``--workers N``: N forked processes, each listening on the port with SO_REUSEPORT.

    The parent holds the port (bound, not listening: port 0 resolves once for all),
    prints the listening line when every worker has started, passes SIGTERM/SIGINT
    on, stops every worker when one ends on its own (exit 1), and exits with the worst
    exit code.  Worker ``i`` draws with seed ``seed + i``.
    """
    try:
        holder = bind(settings.host, settings.port, reuse_port=True, listen=False)
    except OSError as exc:
        print(f"target_server: error: {exc}", file=sys.stderr, flush=True)
        return 1
    host, port = holder.getsockname()[:2]
    rfd, wfd = os.pipe()
    pids: list[int] = []
    for i in range(settings.workers):
        pid = os.fork()
        if pid == 0:  # a worker: its own socket on the same port, its own loop and engine
            os.close(rfd)
            holder.close()
            code = 1
            try:
                sock = bind(host, port, reuse_port=True)
                code = _run(
                    settings.with_overrides(seed=settings.seed + i, port=port),
                    sock,
                    lambda: os.write(wfd, b"."),
                )
            except BaseException:  # a worker never returns into the parent's code
                log.exception("worker %d failed", i)
            finally:
                os._exit(code)
        pids.append(pid)
    os.close(wfd)

    stopping: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        stopping.append(signum)
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    started = 0
    while started < settings.workers:
        if not select.select([rfd], [], [], 0.5)[0]:
            if any(_ended(p) for p in pids):  # one died before starting, the others wait
                break
            continue
        data = os.read(rfd, settings.workers)
        if not data:  # every worker closed the pipe: they all died before starting
            break
        started += len(data)
    os.close(rfd)
    if started == settings.workers:
        print(
            f"target_server: listening on {url_of(holder)} (engine {settings.engine}, "
            f"{settings.workers} workers)",
            file=sys.stderr,
            flush=True,
        )
    else:
        print("target_server: error: a worker failed to start", file=sys.stderr, flush=True)
        forward(signal.SIGTERM, None)
    worst = 0 if started == settings.workers else 1
    remaining = set(pids)
    while remaining:
        pid, status = os.wait()
        if pid not in remaining:
            continue
        remaining.discard(pid)
        code = os.waitstatus_to_exitcode(status)
        if stopping:
            if code in (-signal.SIGTERM, -signal.SIGINT):
                code = 0  # uvicorn re-raises the signal it was stopped with: a clean stop
        else:  # a worker ended on its own: the server is not whole any more, stop the rest
            print(
                f"target_server: error: worker {pid} exited ({code}); stopping",
                file=sys.stderr,
                flush=True,
            )
            code = code or 1
            forward(signal.SIGTERM, None)
        worst = max(worst, code if code >= 0 else 1)  # killed by anything else: 1
    holder.close()
    return worst


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    settings = parse_settings(argv)
    _host_limits()
    logging.basicConfig(
        level=settings.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if settings.workers > 1:
        return _workers(settings)
    return _run(settings)


if __name__ == "__main__":
    sys.exit(main())
