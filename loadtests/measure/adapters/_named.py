"""Shared pieces of the named-event protocols (OpenAI Responses, Anthropic Messages).

Their streams name each event (``event: response.output_text.delta``) and repeat
the name as the data's ``type``.  The usual event is a text delta whose data
differs from the last one's in more than its text (a ``sequence_number``, an
obfuscation string), so ``_openai.Template`` cannot learn it; ``cut`` reads the
text of such an event without decoding the JSON instead, and anything it does
not vouch for is decoded in full.
"""

from __future__ import annotations

from typing import Any

from llmload.loadtests.measure.adapters.base import EventInfo

EMPTY = EventInfo()
DONE = EventInfo(done=True)
UNKNOWN = EventInfo(unknown=True)


def cut(data: str, key: str) -> str | None:
    """The string value that follows ``key`` (``'"delta":"'``) in ``data``, when it can be
    read without decoding: ``key`` occurs once, the string holds no escape and no
    control character, and the object closes after it.  Else None (decode it).

    An unescaped ``"name":"`` can only be a key: inside a JSON string every quote
    is escaped, so the key cannot be the tail of some other value.
    """
    i = data.find(key)
    if i < 0 or data[0] != "{" or data[-1] != "}" or data.find(key, i + 1) >= 0:
        return None
    start = i + len(key)
    end = data.find('"', start)
    if end < 0 or data[end + 1 : end + 2] not in (",", "}"):
        return None
    text = data[start:end]
    if "\\" in text or not text.isprintable():
        return None
    return text


def string(obj: dict[str, Any], key: str) -> str:
    """``obj[key]`` as text (absent or null: ""), or ``ValueError`` for another type."""
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{key!r} is not a string")
    return value


def count(obj: Any, *path: str) -> int | None:
    """An integer at ``obj[path[0]][path[1]]...``, else None."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj if type(obj) is int else None


class Parts:
    """A whole answer's text by kind (a sync body's), into what ``EventInfo`` holds."""

    def __init__(self) -> None:
        self.reasoning: list[str] = []
        self.answer: list[str] = []
        self.calls: list[str] = []
        self.indexes: list[int] = []  # the tool calls' indexes

    def call(self, index: int, text: str) -> None:
        self.calls.append(text)
        self.indexes.append(index)

    def content(self) -> tuple[str, dict[str, Any]]:
        """The answer's text (reasoning, answer, then tool calls) and the ``EventInfo``
        fields that say which is which (none when it is all answer text)."""
        text = "".join(self.answer)
        if not self.reasoning and not self.calls:
            return text, {}
        shape = {
            "reasoning": bool(self.reasoning),
            "answer": text,
            "tool_calls": tuple(self.indexes),
        }
        return "".join(self.reasoning) + text + "".join(self.calls), shape
