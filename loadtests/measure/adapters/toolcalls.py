"""The tool calls of an OpenAI chat answer, collected as the adapter reads it (agent sessions).

``ToolCallTap(adapter)`` is the adapter with one addition: it keeps the calls the
answer made — streamed (``delta.tool_calls[i]``: the first piece carries ``id`` and
``function.name``, later ones ``function.arguments`` pieces, joined by ``index``)
or whole (``message.tool_calls``) — so the next request of an agent session can
carry them back as the assistant's message.  Timing is the adapter's; a tool-call
event the adapter reads as carrying no text is given the call's new text (its
name, then its argument pieces), so the call's first token is the request's first
token and each later piece a token event, as for text.  A chunk without
``"tool_calls"`` in it is handed straight to the adapter (no second decoding).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from llmload.loadtests.measure.adapters.base import Adapter, EventInfo, HttpCall, Prompt
from llmload.loadtests.measure.record import Mode

_MARK = '"tool_calls"'


@dataclass
class ToolCall:
    """One call the model made: its id, the function's name and its JSON arguments (text)."""

    id: str
    name: str
    arguments: str = ""

    def message(self) -> dict[str, Any]:
        """As an entry of an assistant message's ``tool_calls``."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class ToolCallTap:
    """An adapter that also keeps the answer's tool calls (``calls``, reset by ``build``)."""

    def __init__(self, inner: Adapter) -> None:
        self.inner = inner
        self.name = inner.name
        self.endpoint = inner.endpoint
        self._calls: dict[int, ToolCall] = {}

    @property
    def calls(self) -> list[ToolCall]:
        """The calls of the last answer, in their order."""
        return [self._calls[i] for i in sorted(self._calls)]

    def build(self, prompt: Prompt, *, mode: Mode, model: str, options: dict[str, Any]) -> HttpCall:
        self._calls = {}
        return self.inner.build(prompt, mode=mode, model=model, options=options)

    def parse_event(self, event: str | None, data: str) -> EventInfo:
        info = self.inner.parse_event(event, data)
        if _MARK not in data:
            return info
        new = self._take(data, "delta")
        return dataclasses.replace(info, content=new) if new and not info.content else info

    def parse_body(self, body: bytes) -> EventInfo:
        info = self.inner.parse_body(body)
        if _MARK.encode() not in body:
            return info
        new = self._take(body, "message")
        return dataclasses.replace(info, content=new) if new and not info.content else info

    def _take(self, data: str | bytes, key: str) -> str:
        """Add the calls (or pieces of them) in one chunk or body; the text they add."""
        try:
            part = json.loads(data)["choices"][0][key]
            entries = part.get("tool_calls") or []
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return ""  # the adapter says what is wrong with such data
        added = []
        for n, entry in enumerate(entries):
            if not isinstance(entry, dict):
                continue
            index = entry.get("index", n)
            function = entry.get("function") or {}
            name, args = function.get("name"), function.get("arguments")
            call = self._calls.get(index)
            if call is None:
                call = self._calls[index] = ToolCall(str(entry.get("id") or f"call_{index}"), "")
            if isinstance(name, str) and name:
                call.name += name
                added.append(name)
            if isinstance(args, str) and args:
                call.arguments += args
                added.append(args)
        return "".join(added)
