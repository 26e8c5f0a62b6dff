"""Start ``python -m llmload.target_server`` as a subprocess and wait until it is healthy.

One launcher for everything that runs the bundled server out of process: the
load generator's ``loadtest`` command, the benchmarks and the tests.  The
server prints one ``listening on http://HOST:PORT`` line on stderr once it
accepts connections (``--port 0`` included); the launcher reads the real URL
from it, keeps draining stderr into ``log``, and polls ``/health``.

Imports nothing heavy (no FastAPI, no torch): the load generator uses it.
It works in a gevent-patched process too (threads and sleeps become greenlets).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

#: the line ``target_server/__main__.py`` prints once it listens
LISTENING = re.compile(r"listening on (http://\S+)")


class LaunchFailed(RuntimeError):
    """The server exited, never listened or never became healthy (message has its log tail)."""


@dataclass
class ServerProcess:
    """A running ``python -m llmload.target_server``: ``url``, ``proc``, recent stderr ``log``."""

    url: str
    proc: subprocess.Popen[str]
    log: deque[str] = field(default_factory=lambda: deque(maxlen=200))

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout`` s; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def tail(self, lines: int = 3) -> str:
        """The last ``lines`` lines the server wrote to stderr."""
        return "\n".join(list(self.log)[-lines:])

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def wait_healthy(url: str, timeout: float, alive: Callable[[], bool] | None = None) -> None:
    """Poll ``url/health`` until 200 (``TimeoutError`` after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if alive is not None and not alive():
                raise LaunchFailed(f"server at {url} died while starting ({last})")
            try:
                r = client.get(url + "/health")
                if r.status_code == 200:
                    return
                last = f"{r.status_code} {r.text[:200]}"
            except httpx.TransportError as exc:
                last = repr(exc)
            time.sleep(0.05)
    raise TimeoutError(f"{url}/health not 200 after {timeout} s: {last}")


def launch(
    args: Sequence[str],
    *,
    env: Mapping[str, str | None] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    ready_timeout: float = 120.0,
    new_session: bool = False,
    preexec_fn: Callable[[], Any] | None = None,
    on_start: Callable[[subprocess.Popen[str]], None] | None = None,
    module: str = "llmload.target_server",
    loopback: bool = True,
    health: bool = True,
) -> ServerProcess:
    """``python -m llmload.target_server --host 127.0.0.1 --port 0 *args``, healthy when returned.

    ``env`` is added to the inherited environment (a ``None`` value removes the
    variable).  ``on_start`` sees the process as soon as it exists (to register
    it for cleanup).  ``loopback=False`` passes ``args`` exactly (no ``--host``/
    ``--port``: a test of the server's own defaults); ``module`` runs another
    server that prints the same line (the benchmarks' reference server), and
    ``health=False`` returns once it listens.  A ``BaseException`` while
    waiting (Ctrl-C) stops the server and propagates; a server that exits, never
    listens or never gets healthy raises ``LaunchFailed`` with its stderr tail.
    """
    where = ["--host", "127.0.0.1", "--port", "0"] if loopback else []
    cmd = [sys.executable, "-m", module, *where, *args]
    environ = {**os.environ, **(env or {})}
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env={k: v for k, v in environ.items() if v is not None},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
        preexec_fn=preexec_fn,
    )
    if on_start is not None:
        on_start(proc)
    handle = ServerProcess("", proc)
    listening = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            handle.log.append(line.rstrip())
            m = LISTENING.search(line)
            if m and not handle.url:
                handle.url = m.group(1)
                listening.set()
        listening.set()  # exited without listening

    threading.Thread(target=drain, name="target-server-stderr", daemon=True).start()
    deadline = time.monotonic() + ready_timeout
    try:
        listening.wait(ready_timeout)
        if not handle.url:
            raise LaunchFailed(f"{module} never listened (rc={proc.poll()})")
        if health:
            wait_healthy(
                handle.url, max(1.0, deadline - time.monotonic()), alive=lambda: proc.poll() is None
            )
    except (LaunchFailed, TimeoutError) as exc:
        handle.stop()
        raise LaunchFailed(f"{exc}\n{handle.tail()}") from None
    except BaseException:  # Ctrl-C while the model loads
        handle.stop(timeout=2.0)
        raise
    return handle
