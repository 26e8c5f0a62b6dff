"""Serve ``/metrics`` from a background thread, noting every scrape.

Uses the standard library's WSGI server; the body is whatever ``render()``
returns, in the text exposition format (0.0.4), uncompressed.
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

from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.exposition import ThreadingWSGIServer

#: At the end of a run, wait only for clients that scraped this recently (a
#: one-off curl an hour ago is not a scraper).
RECENT_SCRAPER_S = 30.0


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
    """``/metrics`` (any path, as prometheus_client serves it); knows who scraped and when."""

    def __init__(self, render: Callable[[], bytes]) -> None:
        self._render = render
        self._httpd: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._scraped_event: threading.Event | None = None
        #: (client address, User-Agent) -> monotonic time its latest scrape began
        self._scrapers: dict[tuple[str, str], float] = {}
        self.scrapes = 0

    def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Bind and serve in the background; returns the bound port (``port=0`` picks one)."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_cls = type("_Server", (ThreadingWSGIServer,), {"address_family": family})
        self._httpd = make_server(host, port, self._wsgi, server_cls, handler_class=_QuietHandler)
        self._scraped_event = threading.Event()
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

    def wait_for_scrapes_after(self, since: float, timeout_s: float) -> bool:
        """Block until every recent scraper has begun a scrape after ``since`` and been answered.

        A scraper is a (client address, User-Agent) pair that scraped within
        ``RECENT_SCRAPER_S`` before ``since``: each Prometheus of an HA pair,
        and a dashboard's poller, gets its final look.  False on timeout.
        """
        event = self._scraped_event
        if event is None:
            return False
        deadline = time.monotonic() + timeout_s
        with self._lock:
            pending = [k for k, t in self._scrapers.items() if t >= since - RECENT_SCRAPER_S]
        while True:
            with self._lock:
                if all(self._scrapers[k] >= since for k in pending):
                    return True
                event.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            event.wait(remaining)

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
        text = self._render()
        start_response(
            "200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Length", str(len(text)))]
        )
        body = [text]
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            return body
        who = (str(environ.get("REMOTE_ADDR", "")), str(environ.get("HTTP_USER_AGENT", "")))
        return _Body(body, lambda: self._scraped(who, began))

    def _scraped(self, who: tuple[str, str], began: float) -> None:
        with self._lock:
            self.scrapes += 1
            self._scrapers[who] = max(began, self._scrapers.get(who, began))
            event = self._scraped_event
        if event is not None:
            event.set()
