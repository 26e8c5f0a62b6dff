"""OpenAI chat completions (``/v1/chat/completions``), streaming and sync."""

from __future__ import annotations

from typing import Any

from llmload.loadtests.measure.adapters import _openai
from llmload.loadtests.measure.adapters.base import EventInfo, HttpCall, Prompt, register
from llmload.loadtests.measure.record import Mode


def _text(part: dict[str, Any]) -> tuple[str, bool]:
    """New text of a ``delta`` or ``message``: reasoning text first, and whether there was any."""
    content = part.get("content") or ""
    reasoning = part.get("reasoning_content") or part.get("reasoning") or ""
    if not isinstance(content, str) or not isinstance(reasoning, str):
        raise ValueError("chat content is not a string")
    if reasoning:
        return reasoning + content, True
    return content, False


def _delta(choice: dict[str, Any]) -> tuple[str, bool]:
    delta = choice.get("delta")
    return _text(delta) if delta else ("", False)


def _message(choice: dict[str, Any]) -> tuple[str, bool]:
    message = choice.get("message")
    return _text(message) if message else ("", False)


@register("openai-chat")
class OpenAIChat:
    """Chat completions: ``messages`` in, ``choices[0].delta.content`` (or reasoning) out."""

    name = "openai-chat"
    endpoint = "/v1/chat/completions"

    def __init__(self) -> None:
        self._template = _openai.Template('"content":"')  # this stream's chunk skeleton

    def build(self, prompt: Prompt, *, mode: Mode, model: str, options: dict[str, Any]) -> HttpCall:
        """The POST for this prompt; streaming asks for usage in the last chunk."""
        if prompt.messages is not None:
            messages = prompt.messages
        elif prompt.prompt is not None:
            messages = [{"role": "user", "content": prompt.prompt}]
        else:
            raise ValueError(f"prompt {prompt.prompt_id!r} has neither messages nor prompt")
        return _openai.build_call(self.endpoint, "messages", messages, prompt, mode, model, options)

    def parse_event(self, event: str | None, data: str) -> EventInfo:
        """One ``chat.completion.chunk`` (or ``[DONE]``, or an error object)."""
        return _openai.parse_sse(event, data, _delta, self._template)

    def parse_body(self, body: bytes) -> EventInfo:
        """A ``chat.completion`` object (or an error object)."""
        return _openai.parse_json_body(body, _message)
