"""The engine process's entry point for ``--engine-process on`` (see ``engineproc``).

Kept apart from ``enginechild`` so the server can name it as the spawn target
without importing torch: the child imports the model code once it runs.
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any


def child_main(settings: Any, conn: Any, shared: Any) -> None:
    """The engine process's entry point (``enginechild.serve`` does the work)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the server, which stops us
    logging.basicConfig(
        level=settings.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s[engine]: %(message)s",
    )
    from llmload.target_server.model.enginechild import serve

    serve(settings, conn, shared)
