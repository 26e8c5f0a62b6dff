"""OpenAI (legacy) completions (``/v1/completions``), streaming and sync."""

from __future__ import annotations

from typing import Any

from llmload.loadtests.measure.adapters import _openai
from llmload.loadtests.measure.adapters.base import EventInfo, HttpCall, Prompt, register
from llmload.loadtests.measure.record import Mode


def _choice_text(choice: dict[str, Any]) -> _openai.Content:
    text = choice.get("text") or ""
    if not isinstance(text, str):
        raise ValueError("completion text is not a string")
    return text, None


def render_messages(messages: list[dict[str, Any]]) -> str:
    """A chat history as one plain-text prompt ending where the assistant speaks next."""
    lines = [f"{str(m.get('role', 'user')).capitalize()}: {m.get('content', '')}" for m in messages]
    return "\n\n".join(lines) + "\n\nAssistant:"


@register("openai-completions")
class OpenAICompletions:
    """Completions: ``prompt`` in, ``choices[0].text`` out."""

    name = "openai-completions"
    endpoint = "/v1/completions"

    def __init__(self) -> None:
        self._template = _openai.Template('"text":"')  # this stream's chunk skeleton

    def build(self, prompt: Prompt, *, mode: Mode, model: str, options: dict[str, Any]) -> HttpCall:
        """The POST for this prompt; a chat history is rendered as plain text."""
        if prompt.prompt is not None:
            text = prompt.prompt
        elif prompt.messages:
            text = render_messages(prompt.messages)
        else:
            raise ValueError(f"prompt {prompt.prompt_id!r} has neither prompt nor messages")
        return _openai.build_call(self.endpoint, "prompt", text, prompt, mode, model, options)

    def parse_event(self, event: str | None, data: str) -> EventInfo:
        """One ``text_completion`` chunk (or ``[DONE]``, or an error object)."""
        return _openai.parse_sse(event, data, _choice_text, self._template)

    def parse_body(self, body: bytes) -> EventInfo:
        """A ``text_completion`` object (or an error object)."""
        return _openai.parse_json_body(body, _choice_text)
