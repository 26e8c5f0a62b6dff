"""Anthropic's Messages API (``/v1/messages``), streaming and sync.

The request: ``system`` apart from ``messages``, ``max_tokens`` always, the
``anthropic-version`` header, and the API key in ``x-api-key`` (``--api-key-env``
fills it: ``api_key_header``).  A stream is named events, no ``[DONE]``:

* ``message_start`` — the prompt's tokens (``usage.input_tokens``, and
  ``cache_read_input_tokens``: served from a prefix cache);
* ``content_block_start`` / ``content_block_delta`` / ``content_block_stop`` — a
  ``text_delta`` is answer text, a ``thinking_delta`` reasoning, and a ``tool_use``
  block's name (at its start) and ``input_json_delta`` pieces a tool call, counted by
  the block's ``index``; ``signature_delta`` and ``citations_delta`` carry no text;
* ``message_delta`` — ``stop_reason`` (end_turn, max_tokens, tool_use, stop_sequence,
  kept in chat's words: stop, length, tool_calls, stop) and ``usage.output_tokens``;
* ``message_stop`` — the end (``done``); ``ping`` — nothing.

An ``error`` event is a server error (``protocol``), except ``overloaded_error``,
which is its own class (``overloaded``, as HTTP 529 is).  An event type the API
does not define is skipped and counted (``unknown_events``).
"""

from __future__ import annotations

import json
from typing import Any

from llmload.loadtests.measure.adapters import _named, _openai
from llmload.loadtests.measure.adapters.base import (
    EventInfo,
    HttpCall,
    Prompt,
    attach_images,
    chat_messages,
    register,
)
from llmload.loadtests.measure.record import Mode

#: the API version every request names (the one Anthropic's SDKs send)
ANTHROPIC_VERSION = "2023-06-01"
#: Anthropic's stop_reason -> the chat word the records keep
STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}
#: chat's ``tool_choice`` -> Anthropic's
_TOOL_CHOICE = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}
_QUIET = frozenset({"ping", "content_block_stop"})
_QUIET_DELTAS = frozenset({"signature_delta", "citations_delta"})
_TEXT = '"type":"text_delta","text":"'
_TEXT_SPACED = '"type": "text_delta", "text": "'
_TEXT_TYPE = "text_delta"  # a stream without event lines: the fast path's first sieve


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _image_part(url: str) -> dict[str, Any]:
    """An image block: a ``data:`` URL as a base64 source, another URL as a url source."""
    head, sep, data = url.partition(",")
    if url.startswith("data:") and sep and head.endswith(";base64"):
        media = head[len("data:") : -len(";base64")]
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _error(err: Any) -> tuple[str, str | None]:
    """An error object's message, and its record class when not ``protocol``."""
    if not isinstance(err, dict):
        return str(err), None
    kind, message = err.get("type"), err.get("message") or str(err)
    text = f"{kind}: {message}" if kind and str(kind) not in str(message) else str(message)
    return text, ("overloaded" if kind == "overloaded_error" else None)


def _stop(reason: Any) -> str | None:
    return STOP_REASONS.get(reason, str(reason)) if reason else None


def _tools(tools: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """Chat ``tools`` as Anthropic's (``input_schema`` for ``parameters``)."""
    out = []
    for tool in tools:
        function = tool.get("function") or {}
        spec: dict[str, Any] = {"name": function.get("name")}
        if "description" in function:
            spec["description"] = function["description"]
        spec["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
        out.append(spec)
    return out


@register("anthropic-messages")
class AnthropicMessages:
    """The Messages API: ``system`` + ``messages`` in, named events (or a message) out."""

    name = "anthropic-messages"
    endpoint = "/v1/messages"
    end_marker = "message_stop"
    sends_messages = True
    api_key_header = "x-api-key"

    def __init__(self) -> None:
        self._skeleton = _named.Skeleton()  # this stream's text delta, around its text

    def build(self, prompt: Prompt, *, mode: Mode, model: str, options: dict[str, Any]) -> HttpCall:
        """The POST for this prompt; ``stop`` goes as ``stop_sequences``."""
        messages = chat_messages(prompt)
        messages = attach_images(messages, prompt.images, _text_part, _image_part)
        system = [str(m.get("content") or "") for m in messages if m.get("role") == "system"]
        body: dict[str, Any] = {"model": model, "max_tokens": prompt.max_tokens}
        if system:
            body["system"] = "\n\n".join(system)
        body["messages"] = [
            {"role": m.get("role", "user"), "content": m.get("content") or ""}
            for m in messages
            if m.get("role") != "system"
        ]
        body["stream"] = mode == "stream"
        if prompt.min_tokens:
            body["min_tokens"] = prompt.min_tokens  # vLLM's extension; exact output lengths
        if prompt.tools:
            body["tools"] = _tools(prompt.tools)
        if prompt.tool_choice in _TOOL_CHOICE:
            body["tool_choice"] = _TOOL_CHOICE[prompt.tool_choice]
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        headers.update(_openai.apply_options(body, options))
        if "stop" in body:
            stop = body.pop("stop")
            body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
        return HttpCall("POST", self.endpoint, body, headers, stream=mode == "stream")

    def parse_event(self, event: str | None, data: str) -> EventInfo:
        """One named event (module docstring)."""
        if event == "content_block_delta" or (event is None and _TEXT_TYPE in data):
            text = self._skeleton.read(data)
            if text is None:
                text = self._cut(data)
            if text is not None:
                return _openai.plain(text) if text else _named.EMPTY
        if data == "[DONE]":  # a gateway's end marker after the API's own (LiteLLM's)
            return _named.DONE
        obj = _named.decode(data)
        kind = obj.get("type")
        if not isinstance(kind, str):
            raise ValueError("a Messages API event without a 'type'")
        if event is not None and event != kind:
            raise ValueError(f"the event is named {event!r} but its type is {kind!r}")
        if kind == "content_block_delta":
            return _delta(obj)
        if kind == "content_block_start":
            return _block_start(obj)
        if kind == "message_start":
            message = obj.get("message")
            if not isinstance(message, dict):
                raise ValueError("message_start carries no message")
            usage = message.get("usage")
            return EventInfo(
                usage_prompt_tokens=_named.count(usage, "input_tokens"),
                usage_cached_tokens=_named.count(usage, "cache_read_input_tokens"),
            )
        if kind == "message_delta":
            delta = obj.get("delta")
            reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            usage = obj.get("usage")
            # the final usage: some servers (LiteLLM) count the prompt only here; a 0 here
            # does not undo message_start's count
            return EventInfo(
                usage_prompt_tokens=_named.count(usage, "input_tokens") or None,
                usage_cached_tokens=_named.count(usage, "cache_read_input_tokens") or None,
                usage_output_tokens=_named.count(usage, "output_tokens"),
                finish_reason=_stop(reason),
                server=_openai.server_timings(obj),
            )
        if kind == "message_stop":
            return _named.DONE
        if kind == "error":
            message, error_class = _error(obj.get("error") or obj)
            return EventInfo(error=message, error_class=error_class)
        if kind in _QUIET:
            return _named.EMPTY
        return _named.UNKNOWN

    def _cut(self, data: str) -> str | None:
        """A text delta's text by ``_named.cut`` (else None), its skeleton taken."""
        for key in (_TEXT, _TEXT_SPACED):  # compact, or Python's json.dumps spacing (LiteLLM)
            text = _named.cut(data, key)
            if text is not None:
                self._skeleton.take(data, key, text)
                return text
        return None

    def parse_body(self, body: bytes) -> EventInfo:
        """A message object (or an error object)."""
        obj = _openai.decode(body)
        if obj.get("type") == "error" or "error" in obj:
            message, error_class = _error(obj.get("error") or obj)
            return EventInfo(error=message, error_class=error_class, done=True)
        content = obj.get("content")
        if not isinstance(content, list):
            raise ValueError("message has no 'content' list")
        parts = _named.Parts()
        for index, block in enumerate(content):
            if not isinstance(block, dict):
                raise ValueError("a content block is not an object")
            kind = block.get("type")
            if kind == "text":
                parts.answer.append(_named.string(block, "text"))
            elif kind == "thinking":
                parts.reasoning.append(_named.string(block, "thinking"))
            elif kind == "tool_use":
                parts.call(index, _named.string(block, "name") + json.dumps(block.get("input")))
        text, shape = parts.content()
        usage = obj.get("usage")
        return EventInfo(
            content=text,
            usage_output_tokens=_named.count(usage, "output_tokens"),
            usage_prompt_tokens=_named.count(usage, "input_tokens"),
            usage_cached_tokens=_named.count(usage, "cache_read_input_tokens"),
            server=_openai.server_timings(obj),
            finish_reason=_stop(obj.get("stop_reason")),
            done=True,
            **shape,
        )


def _delta(obj: dict[str, Any]) -> EventInfo:
    """A ``content_block_delta``: text, thinking, or a piece of a tool call's input."""
    delta = obj.get("delta")
    if not isinstance(delta, dict):
        raise ValueError("content_block_delta carries no delta")
    kind = delta.get("type")
    if kind == "text_delta":
        text = _named.string(delta, "text")
        return _openai.plain(text) if text else _named.EMPTY
    if kind == "thinking_delta":
        text = _named.string(delta, "thinking")
        return EventInfo(content=text, reasoning=True, answer="") if text else _named.EMPTY
    if kind == "input_json_delta":
        return _call(obj, _named.string(delta, "partial_json"))
    if kind in _QUIET_DELTAS:
        return _named.EMPTY
    return _named.UNKNOWN


def _block_start(obj: dict[str, Any]) -> EventInfo:
    """A ``content_block_start``: a tool call's name, or the text a block starts with."""
    block = obj.get("content_block")
    if not isinstance(block, dict):
        raise ValueError("content_block_start carries no content_block")
    kind = block.get("type")
    if kind == "tool_use":
        return _call(obj, _named.string(block, "name"))
    if kind == "text":
        text = _named.string(block, "text")
        return _openai.plain(text) if text else _named.EMPTY
    if kind == "thinking":
        text = _named.string(block, "thinking")
        return EventInfo(content=text, reasoning=True, answer="") if text else _named.EMPTY
    if kind == "redacted_thinking":
        return _named.EMPTY
    return _named.UNKNOWN


def _call(obj: dict[str, Any], text: str) -> EventInfo:
    """A piece of the tool call in the block at ``index``."""
    index = obj.get("index")
    if type(index) is not int:
        raise ValueError("a tool_use event without an integer index")
    return EventInfo(content=text, answer="", tool_calls=(index,))
