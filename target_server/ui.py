"""The bundled browser UI (``--ui gradio``): a Gradio ``ChatInterface`` at ``/ui``.

It streams from the server's own engine, so the seeds' setup — a Gradio chat
app in front of a model — runs on this machine and can be load-tested through
Gradio's HTTP API (``--protocol gradio --api-name chat``, target
``http://host:port/ui``).  Gradio's queue stands in for the server's admission
here: ``--max-concurrency`` becomes the chat's ``concurrency_limit`` (0 =
unlimited; 1 reproduces Gradio's default one-at-a-time queue) and
``--max-queue`` the queue's ``max_size``.  UI requests do not pass through the
``/v1`` handlers, so they are not counted in the ``llmserve_`` metrics.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

from llmload.target_server.engine import Engine, EngineInputError, GenerationRequest

UI_PATH = "/ui"
API_NAME = "chat"
#: max_tokens of a UI request, capped by ``--max-output-tokens``
UI_MAX_TOKENS = 256


def _text(content: Any) -> str:
    """A chat message's text (Gradio history content may be a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_text(part) for part in content)
    if isinstance(content, dict):
        return _text(content.get("text") or content.get("content") or "")
    return "" if content is None else str(content)


def chat_fn(engine: Engine, settings: Any) -> Any:
    """The ChatInterface fn: ``(message, history)`` -> the reply so far, once per token."""
    import gradio as gr

    max_tokens = min(UI_MAX_TOKENS, settings.max_output_tokens)

    async def respond(message: Any, history: list[dict[str, Any]]) -> AsyncIterator[str]:
        if not engine.ready:
            raise gr.Error("the engine is still loading")
        messages = [
            {"role": m["role"], "content": _text(m.get("content"))}
            for m in history or []
            if isinstance(m, dict) and m.get("role") in ("user", "assistant")
        ]
        messages.append({"role": "user", "content": _text(message)})
        request = GenerationRequest(
            request_id=f"ui-{uuid.uuid4().hex[:24]}",
            messages=messages,
            prompt=None,
            max_tokens=max_tokens,
        )
        try:
            prepared = engine.prepare(request)
        except EngineInputError as exc:
            raise gr.Error(str(exc)) from None
        reply = ""
        pieces = engine.generate(prepared)
        try:
            async for piece in pieces:
                if piece.text:
                    reply += piece.text
                    yield reply
        finally:
            await pieces.aclose()  # type: ignore[attr-defined]  # an async generator's aclose, typed as AsyncIterator

    return respond


def build_ui(engine: Engine, settings: Any) -> Any:
    """The ``gr.Blocks`` of the chat UI (not mounted)."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import gradio as gr

    limit = settings.max_concurrency or None
    demo = gr.ChatInterface(
        chat_fn(engine, settings),
        title=f"llmload · {engine.model_name}",
        api_name=API_NAME,
        concurrency_limit=limit,
        analytics_enabled=False,
    )
    demo.queue(max_size=settings.max_queue or None)
    return demo


def mount(app: Any, engine: Engine, settings: Any) -> None:
    """Mount the chat UI on ``app`` at ``/ui`` (Gradio's queue starts with the app)."""
    import importlib.util

    if importlib.util.find_spec("gradio") is None:
        raise RuntimeError(
            "--ui gradio needs gradio, which the core install leaves out: pip install "
            "'llmload[ui]' (in a checkout: pip install -e '.[ui]'), or run with --ui none"
        )
    import gradio as gr

    gr.mount_gradio_app(app, build_ui(engine, settings), path=UI_PATH, footer_links=["api"])
