"""Shared test fixtures.

``start_server(**overrides)`` -> ``ThreadedServer`` (``.url``, ``.app``, ``.engine``,
``.settings``, ``.state``, ``.metric(name, **labels)``): the real app under
uvicorn in a background thread on 127.0.0.1:0, healthy when returned, stopped
at teardown.  ``start_server_proc(*args, env=None)`` -> ``ServerProcess``
(``.url``, ``.proc``): ``python -m llmload.target_server --port 0 *args`` as a
subprocess, terminated at teardown.  Other areas register their fixture
modules in ``pytest_plugins``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from llmload.target_server.serving import ThreadedServer, start_server_thread
from tests.fixtures.server_proc import ServerProcess, start_server_process

pytest_plugins: list[str] = [
    "tests.fixtures.prometheus",
    "tests.fixtures.reports",
    "tests.fixtures.nginx",
    "tests.fixtures.grafana",
    "tests.fixtures.model",
    "tests.fixtures.gate",
]


@pytest.fixture
def start_server() -> Iterator[Callable[..., ThreadedServer]]:
    """Factory: ``start_server(ttft_ms=50, itl_ms=10, ...)`` -> a running ``ThreadedServer``.

    Keyword arguments are ``Settings`` overrides, plus ``engine=`` (inject an engine
    object) and ``wait_ready=False`` (return before ``/health`` is 200).
    """
    started: list[ThreadedServer] = []

    def factory(**overrides: Any) -> ThreadedServer:
        overrides.setdefault("log_level", "warning")
        server = start_server_thread(**overrides)
        started.append(server)
        return server

    yield factory
    for server in reversed(started):
        server.stop()


@pytest.fixture
def start_server_proc() -> Iterator[Callable[..., ServerProcess]]:
    """Factory: ``start_server_proc("--itl-ms", "5", env={...})`` -> a running ``ServerProcess``."""
    started: list[ServerProcess] = []

    def factory(*args: str, **kwargs: Any) -> ServerProcess:
        proc = start_server_process(*args, **kwargs)
        started.append(proc)
        return proc

    yield factory
    for proc in reversed(started):
        proc.stop()
