"""The transformers engines: the embedded tiny Qwen2 (default) or a local checkpoint.

``--engine transformers --batching none`` is ``ThreadedEngine`` (one
``model.generate`` thread per request, the seeds' approach);
``--batching continuous`` is one decode loop that adds and removes requests at
every step: ``ProcessEngine`` runs it in its own process (``--engine-process on``,
the default), ``BatchedEngine`` on a thread of the server (``off``).  Importing
this package registers the factory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmload.target_server.engine import Engine, register

if TYPE_CHECKING:  # torch and transformers load with the engine, not with the package
    from llmload.target_server.model.base import ModelEngine


@register("transformers")
def build(settings: Any) -> Engine:
    """The engine for ``settings.batching``."""
    engine: ModelEngine
    if settings.batching == "none":
        from llmload.target_server.model.threaded import ThreadedEngine

        engine = ThreadedEngine(settings)
    elif settings.engine_process == "on":
        from llmload.target_server.model.engineproc import ProcessEngine

        engine = ProcessEngine(settings)
    else:
        from llmload.target_server.model.batched import BatchedEngine

        engine = BatchedEngine(settings)
    return engine
