"""``python -m target_server``: parse settings, build the engine and app, serve with uvicorn.

Once the socket accepts connections, one line goes to stderr::

    target_server: listening on http://127.0.0.1:PORT (engine synthetic, ...)

with the real port (``--port 0`` picks a free one).  ``/health`` answers 200
once the engine has loaded.  If the engine fails to load the process exits 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
from collections.abc import Sequence

import uvicorn

from target_server.app import build_app
from target_server.engine import build_engine
from target_server.serving import bind, url_of, uvicorn_config
from target_server.settings import Settings, parse_settings

log = logging.getLogger("target_server")


async def serve(settings: Settings) -> int:
    """Run until interrupted; 1 if the engine failed to build or start, or the port is taken."""
    try:
        engine = build_engine(settings)
        app = build_app(engine, settings)
        sock = bind(settings.host, settings.port)
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
        # Everything loaded so far lives for the whole process: keep it out of the
        # collector, or full collections over it stall every stream (~100 ms at 1000).
        # Full collections then stay rare: at 1000 streams each one is a visible stall.
        gc.collect()
        gc.freeze()
        gc.set_threshold(700, 10, 1000)
    await task
    return 0


def _raise_fd_limit() -> None:
    """Hundreds of streams need hundreds of sockets: lift the soft fd limit to the hard one."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    settings = parse_settings(argv)
    _raise_fd_limit()
    logging.basicConfig(
        level=settings.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if settings.loop == "uvloop" or settings.loop == "auto":
        try:
            import uvloop

            return uvloop.run(serve(settings))
        except ImportError:
            if settings.loop == "uvloop":
                raise
    return asyncio.run(serve(settings))


if __name__ == "__main__":
    sys.exit(main())
