"""Hugging Face text-generation-inference's native API: ``/generate_stream`` and ``/generate``.

Streaming events are ``data: {"index", "token": {"id", "text", "logprob",
"special"}, "generated_text", "details"}``; the last one carries
``generated_text`` and (with ``details: true``) ``details.generated_tokens`` and
``finish_reason``.  Special tokens (``</s>``) carry no visible text and do not
count.  Errors arrive as ``data: {"error", "error_type"}``.  This API takes
plain text: a chat prompt's messages are joined by blank lines (for TGI's
chat template use ``--protocol openai-chat`` against its ``/v1/chat/completions``).
"""

from __future__ import annotations

import json
from typing import Any

from llmload.loadtests.measure.adapters.base import EventInfo, HttpCall, Prompt, register
from llmload.loadtests.measure.record import Mode


def _inputs(prompt: Prompt) -> str:
    """The prompt as TGI's plain-text ``inputs``."""
    if prompt.messages:
        return "\n\n".join(str(m.get("content") or "") for m in prompt.messages)
    return prompt.prompt or ""


def _parameters(prompt: Prompt, options: dict[str, Any]) -> dict[str, Any]:
    """TGI ``parameters``: always ``details`` (so usage is known), sampling when asked."""
    params: dict[str, Any] = {"max_new_tokens": prompt.max_tokens, "details": True}
    temperature = options.get("temperature")
    if temperature is not None and float(temperature) > 0:
        params["temperature"] = float(temperature)
        params["do_sample"] = True
    for key in ("top_p", "seed", "stop"):
        if options.get(key) is not None:
            params[key] = options[key]
    return params


def _usage(details: Any) -> tuple[int | None, str | None]:
    """(generated_tokens, finish_reason) from a ``details`` object."""
    if not isinstance(details, dict):
        return None, None
    tokens = details.get("generated_tokens")
    return (int(tokens) if tokens is not None else None), details.get("finish_reason")


@register("tgi")
class TgiAdapter:
    """TGI's ``/generate_stream`` (stream) and ``/generate`` (sync)."""

    name = "tgi"

    def __init__(self) -> None:
        self.endpoint = "/generate_stream"

    def build(self, prompt: Prompt, *, mode: Mode, model: str, options: dict[str, Any]) -> HttpCall:
        """One POST; TGI serves one model, so ``model`` is not sent."""
        self.endpoint = "/generate_stream" if mode == "stream" else "/generate"
        body = {"inputs": _inputs(prompt), "parameters": _parameters(prompt, options)}
        return HttpCall("POST", self.endpoint, body, stream=mode == "stream")

    def parse_event(self, event: str | None, data: str) -> EventInfo:
        """One ``/generate_stream`` event."""
        if data.strip() == "[DONE]":
            return EventInfo(done=True)
        try:
            obj = json.loads(data)
        except ValueError as exc:
            raise ValueError(f"tgi: bad event data {data[:200]!r}") from exc
        if not isinstance(obj, dict):
            raise ValueError(f"tgi: event is not an object: {data[:200]!r}")
        if obj.get("error") is not None:
            return EventInfo(error=str(obj["error"]), done=True)
        token = obj.get("token") or {}
        text = "" if token.get("special") else str(token.get("text") or "")
        tokens, finish = _usage(obj.get("details"))
        return EventInfo(
            content=text,
            usage_output_tokens=tokens,
            finish_reason=finish,
            done=obj.get("generated_text") is not None,
        )

    def parse_body(self, body: bytes) -> EventInfo:
        """A ``/generate`` body: ``{"generated_text", "details"}`` (or a one-item list of it)."""
        try:
            obj = json.loads(body)
        except ValueError as exc:
            raise ValueError(f"tgi: bad body {body[:200]!r}") from exc
        if isinstance(obj, list) and obj:
            obj = obj[0]
        if not isinstance(obj, dict):
            raise ValueError(f"tgi: body is not an object: {body[:200]!r}")
        if obj.get("error") is not None:
            return EventInfo(error=str(obj["error"]), done=True)
        if "generated_text" not in obj:
            raise ValueError("tgi: body has no generated_text")
        tokens, finish = _usage(obj.get("details"))
        return EventInfo(
            content=str(obj["generated_text"] or ""),
            usage_output_tokens=tokens,
            finish_reason=finish,
            done=True,
        )
