"""The bundled server as a subprocess (``python -m llmload.target_server --port 0 ...``).

For benchmarks and tests that need the server outside their own process (locust distributed or
multi-process runs)::

    with start_server_process("--ttft-ms", "50", "--itl-ms", "10") as proc:
        httpx.get(proc.url + "/v1/models")

A thin wrapper over ``target_server.launch`` (the launcher the load generator
uses too), run from the repository root; benchmarks and tests share it.
"""

from __future__ import annotations

from collections.abc import Mapping

from bench.mdsection import ROOT
from llmload.target_server.launch import ServerProcess, launch

__all__ = ["ROOT", "ServerProcess", "start_server_process"]


def start_server_process(
    *args: str,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 120.0,
) -> ServerProcess:
    """Launch ``llmload serve --port 0 *args`` on 127.0.0.1, healthy when returned.

    ``env`` is added to the inherited environment (e.g. ``{"LLMLOAD_API_KEY": ...}``).
    Raises ``target_server.launch.LaunchFailed`` (a ``RuntimeError``, with the
    stderr tail) if it exits, never listens or never becomes healthy.
    """
    return launch(args, env=env, cwd=ROOT, ready_timeout=ready_timeout)
