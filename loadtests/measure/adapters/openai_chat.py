"""OpenAI chat completions (``/v1/chat/completions``), streaming and sync."""

from __future__ import annotations

from typing import Any

from llmload.loadtests.measure.adapters import _openai
from llmload.loadtests.measure.adapters.base import (
    EventInfo,
    HttpCall,
    Prompt,
    attach_images,
    chat_messages,
    register,
)
from llmload.loadtests.measure.record import Mode


def _text(part: dict[str, Any]) -> _openai.Content:
    """New text of a ``delta`` or ``message``: reasoning, answer, then tool-call text.

    Plain answer text is ``(text, None)``; an event with reasoning (``reasoning_content``,
    or ``reasoning`` as newer vLLM names it) or tool calls also says which part is the
    answer and which calls it carries pieces of (``_openai.Content``).
    """
    content = part.get("content") or ""
    reasoning = part.get("reasoning_content") or part.get("reasoning") or ""
    if not isinstance(content, str) or not isinstance(reasoning, str):
        raise ValueError("chat content is not a string")
    calls = part.get("tool_calls")
    if not reasoning and not calls:
        return content, None
    tool_text, indexes = _tool_calls(calls) if calls else ("", ())
    shape = {"reasoning": bool(reasoning), "answer": content, "tool_calls": indexes}
    return reasoning + content + tool_text, shape


def _tool_calls(calls: Any) -> tuple[str, tuple[int, ...]]:
    """The text (function names and argument pieces) and the indexes of ``tool_calls``.

    A streamed call's pieces carry its ``index``; a message's calls are numbered by
    position.  Raises ``ValueError`` for a shape that is not OpenAI's.
    """
    if not isinstance(calls, list):
        raise ValueError("tool_calls is not a list")
    text, indexes = "", []
    for position, call in enumerate(calls):
        if not isinstance(call, dict):
            raise ValueError("a tool call is not an object")
        index = call.get("index", position)
        function = call.get("function") or {}
        if type(index) is not int or not isinstance(function, dict):
            raise ValueError("a tool call has no integer index or no function object")
        name, args = function.get("name") or "", function.get("arguments") or ""
        if not isinstance(name, str) or not isinstance(args, str):
            raise ValueError("a tool call's name or arguments is not a string")
        text += name + args
        indexes.append(index)
    return text, tuple(indexes)


def _delta(choice: dict[str, Any]) -> _openai.Content:
    delta = choice.get("delta")
    return _text(delta) if delta else ("", None)


def _message(choice: dict[str, Any]) -> _openai.Content:
    message = choice.get("message")
    return _text(message) if message else ("", None)


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


@register("openai-chat")
class OpenAIChat:
    """Chat completions: ``messages`` in, ``delta.content`` (reasoning, tool calls) out."""

    name = "openai-chat"
    endpoint = "/v1/chat/completions"
    sends_messages = True

    def __init__(self) -> None:
        self._template = _openai.Template('"content":"')  # this stream's chunk skeleton

    def build(self, prompt: Prompt, *, mode: Mode, model: str, options: dict[str, Any]) -> HttpCall:
        """The POST for this prompt; streaming asks for usage in the last chunk."""
        messages = chat_messages(prompt)
        messages = attach_images(messages, prompt.images, _text_part, _image_part)
        return _openai.build_call(self.endpoint, "messages", messages, prompt, mode, model, options)

    def parse_event(self, event: str | None, data: str) -> EventInfo:
        """One ``chat.completion.chunk`` (or ``[DONE]``, or an error object)."""
        return _openai.parse_sse(event, data, _delta, self._template)

    def parse_body(self, body: bytes) -> EventInfo:
        """A ``chat.completion`` object (or an error object)."""
        return _openai.parse_json_body(body, _message)
