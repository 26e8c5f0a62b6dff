"""Shared test fixtures.

``start_server(**overrides)`` -> ``ThreadedServer`` (``.url``, ``.app``, ``.engine``,
``.settings``, ``.state``, ``.metric(name, **labels)``): the real app under
uvicorn in a background thread on 127.0.0.1:0, healthy when returned, stopped
at teardown.  ``start_server_proc(*args, env=None)`` -> ``ServerProcess``
(``.url``, ``.proc``): ``python -m llmload.target_server --port 0 *args`` as a
subprocess, terminated at teardown.  Other areas register their fixture
modules in ``pytest_plugins``.

``make test`` runs the suite on three pytest-xdist workers (``-n 3 --dist loadgroup``):
a module's tests all go to one worker (its fixtures are set up once), and the modules
in ``ONE_AT_A_TIME`` go together as one unit, so those never run beside each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llmload.target_server.serving import ThreadedServer, start_server_thread
from tests.fixtures.server_proc import ServerProcess, start_server_process

#: the heaviest tests on the CPU (capacity searches, a ramp, the gates' runs, a master
#: spinning on purpose, 100k records) and the ones a busy CPU has made fail (a request
#: timed against a kill and restart; a queue wait timed against a generation): one unit,
#: so one worker runs them in turn and none runs beside another
ONE_AT_A_TIME = {
    "test_capacity.py",
    "test_capacity_workloads.py",
    "test_capacity_prompts.py",
    "test_server_metrics_run.py",
    "test_master_behind.py",
    "test_steady_run.py",
    "test_reports_html.py",
    "test_gate_slo.py",
    "test_gate_paired.py",
    "test_gate_synthetic.py",
    "test_reliability_faults.py",
    "test_server_admission.py",
}

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


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook; without xdist it is never called
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: whole modules to a worker, ``ONE_AT_A_TIME`` as one unit.

    xdist 3.8's own loadgroup reads ``xdist_group`` marks from the test ids, which
    pytest 9.2 no longer lets it rewrite (pytest-dev/pytest-xdist#1386): the marks are
    silently ignored and a module's tests are spread, its fixtures set up on both workers.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "one-at-a-time" if Path(module).name in ONE_AT_A_TIME else module

    return ModuleGroups(config, log)
