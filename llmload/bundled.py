"""The bundled server for ``loadtest`` when no target is given (``llmload.run.loadtest`` uses it).

With ``--target`` empty, the bundled server starts as a subprocess
(``python -m llmload.target_server --port 0``) with the best engine available: the
embedded real model with continuous batching (``transformers``), falling
back to ``synthetic`` when that engine cannot start here; ``--engine`` (make's
``ENGINE=``) picks one explicitly.  The run waits for ``/health``, runs, and
stops the server whatever happened.

The server runs in its own session (a Ctrl-C at the terminal reaches only the
load generator, which then stops the run cleanly), so it must be killed
explicitly: in a ``finally``, from ``atexit``, and on Linux by the kernel when
this process dies (``PR_SET_PDEATHSIG``), which also covers the second Ctrl-C
that exits at once without running either.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

from llmload.target_server.launch import LaunchFailed, ServerProcess, launch

DEFAULT_ENGINE = "transformers"
FALLBACK_ENGINE = "synthetic"
ENGINE_ARGS = {"transformers": ["--batching", "continuous"]}
#: the embedded model is built on first use: allow minutes before /health answers
READY_TIMEOUT_S = 900.0


#: bundled servers still running, killed at exit whatever the path out
_LIVE: set[subprocess.Popen[str]] = set()
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """In the child before exec (Linux): SIGKILL when the parent dies, even by ``os._exit``."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _kill_live() -> None:
    """``atexit``: kill every bundled server still running (its whole process group)."""
    for proc in list(_LIVE):
        _LIVE.discard(proc)
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)


atexit.register(_kill_live)


class ServerFailed(RuntimeError):
    """The bundled server exited or never became healthy (message carries its log tail)."""


@dataclass
class BundledServer:
    """A running ``python -m llmload.target_server`` subprocess, killed at exit whatever happens."""

    engine: str
    process: ServerProcess

    @property
    def url(self) -> str:
        return self.process.url

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        try:
            self.process.stop(timeout)
        finally:
            _LIVE.discard(self.process.proc)


def start_server(
    engine: str, extra: list[str], ready_timeout: float = READY_TIMEOUT_S
) -> BundledServer:
    """Start the bundled server on 127.0.0.1:0 and wait until ``/health`` is 200."""
    parent = os.getpid()
    try:
        process = launch(
            ["--engine", engine, *ENGINE_ARGS.get(engine, []), *extra],
            ready_timeout=ready_timeout,
            new_session=True,
            preexec_fn=(lambda: _die_with_parent(parent)) if sys.platform == "linux" else None,
            on_start=_LIVE.add,
        )
    except LaunchFailed as exc:
        raise ServerFailed(
            f"bundled server (engine {engine}) did not become healthy: {exc}"
        ) from None
    return BundledServer(engine, process)
