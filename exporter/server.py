"""Serve one registry on ``/metrics`` from a background thread, noting every scrape.

Uses the standard library's WSGI server with prometheus_client's WSGI app.
Under gevent monkey-patching (locust applies it) ``threading.Thread`` is a
greenlet and the sockets are cooperative, so the server runs on the load
generator's hub like locust's own web UI; without patching it is an OS thread.
Threads and events are created at ``start`` time, never at import, so the
patched versions are picked up whichever order the modules were imported in.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr for every scrape."""

    def log_message(self, format: str, *args: Any) -> None:
        return None


class _Body:
    """A response body that reports when the server has finished sending it."""

    def __init__(self, body: Iterable[bytes], done: Callable[[], None]) -> None:
        self._body, self._done = body, done

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        self._done()


class MetricsServer:
    """``/metrics`` for one registry; knows when the last scrape began and ended."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._app = make_wsgi_app(registry)
        self._httpd: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._watch_after: float | None = None
        self._watched: threading.Event | None = None
        self.scrapes = 0

    def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Bind and serve in the background; returns the bound port (``port=0`` picks one)."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_cls = type("_Server", (ThreadingWSGIServer,), {"address_family": family})
        self._httpd = make_server(host, port, self._wsgi, server_cls, handler_class=_QuietHandler)
        self._watched = threading.Event()
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="llmload-metrics",
            daemon=True,
        )
        self._thread.start()
        return int(self._httpd.server_address[1])

    @property
    def running(self) -> bool:
        return self._httpd is not None

    def wait_for_scrape_after(self, since: float, timeout_s: float) -> bool:
        """Block until a scrape that *began* after ``since`` (monotonic) has been sent."""
        if self._watched is None:
            return False
        with self._lock:
            self._watch_after = since
            self._watched.clear()
        return self._watched.wait(timeout_s)

    def stop(self) -> None:
        """Stop serving and release the port."""
        httpd, thread = self._httpd, self._thread
        self._httpd = self._thread = None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=5.0)

    def _wsgi(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        began = time.monotonic()
        body = self._app(environ, start_response)
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            return body
        return _Body(body, lambda: self._scraped(began))

    def _scraped(self, began: float) -> None:
        with self._lock:
            self.scrapes += 1
            after, watched = self._watch_after, self._watched
        if watched is not None and after is not None and began >= after:
            watched.set()
