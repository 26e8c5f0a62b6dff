"""Shared pieces of the named-event protocols (OpenAI Responses, Anthropic Messages).

Their streams name each event (``event: response.output_text.delta``) and repeat
the name as the data's ``type``.  The usual event is a text delta whose data
differs from the last one's in more than its text (a ``sequence_number``, an
obfuscation string), so ``_openai.Template`` cannot learn it; ``cut`` reads the
text of such an event without decoding the JSON instead, and anything it does
not vouch for is decoded in full.  The Messages API's text deltas, though, differ
only in their text within a block: ``Skeleton`` learns them from what ``cut`` read.
"""

from __future__ import annotations

import json
from typing import Any

from llmload.loadtests.measure.adapters import _openai
from llmload.loadtests.measure.adapters.base import EventInfo

EMPTY = EventInfo()
DONE = EventInfo(done=True)
UNKNOWN = EventInfo(unknown=True)
_scan = json.JSONDecoder().raw_decode


def cut(data: str, key: str) -> str | None:
    """The string value that follows ``key`` (``'"delta":"'``) in ``data``, when it can be
    read without decoding: ``key`` occurs once, the string holds no escape and no
    control character, and the object closes after it.  Else None (decode it).

    An unescaped ``"name":"`` can only be a key: inside a JSON string every quote
    is escaped, so the key cannot be the tail of some other value.  "Once" is checked
    on what follows the string only: no occurrence starts before the first
    (``partition``) or inside the string (it has no quote); one starting at the
    string's closing quote would put the key's name after it, not ``,`` or ``}``, and
    one overlapping the first would end the string before a ``:``.  Few steps: on an
    event this short each costs about what a scan of it does, and this is the usual
    event's whole cost in the adapter.
    """
    _, _, tail = data.partition(key)
    text, quote, rest = tail.partition('"')
    if (
        not quote
        or data[-1] != "}"  # so ``rest``, which ends ``data``, is not empty
        or rest[0] not in ",}"
        or key in rest
        or data[0] != "{"
        or "\\" in text
        or not text.isprintable()
    ):
        return None
    return text


class Skeleton(_openai.Template):
    """``_openai.Template`` for text events that differ only in their text, taken from
    what ``cut`` read: the Messages API's ``content_block_delta`` (its type, its block's
    index, the text), where ``read`` costs half of ``cut``.

    ``cut`` vouched for the string after the one ``key`` of an object that closes after
    it; the same prefix and suffix around another string body without quote, escape or
    control character is the same object with another text, and ``cut`` would read
    that text from it (``read``'s answer).  Not for the Responses API: its events carry
    a ``sequence_number``, so no two of them fit one skeleton.
    """

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("")  # no key of its own: ``take`` is told where the text was

    def take(self, data: str, key: str, text: str) -> None:
        """Take ``data``'s skeleton: ``cut(data, key)`` read ``text`` from it.  Backs
        off as ``Template.learn`` does while events do not fit."""
        self.misses = misses = self.misses + 1
        if misses & (misses - 1) and misses % 64:  # not 1, 2, 4, ... 64, nor a multiple of 64
            return
        start = data.find(key) + len(key)
        self.prefix, self.suffix = data[:start], data[start + len(text) :]


def decode(data: str) -> dict[str, Any]:
    """``_openai.decode`` of an event's data (a JSON object or ``ValueError``), without
    ``json.loads``' checks and its two whitespace scans when the data is the object and
    nothing else, as servers write it (a third of the cost of a small event's decoding).
    Anything else is decoded by ``_openai.decode``, which says what is wrong."""
    try:
        obj, end = _scan(data)
    except ValueError:
        return _openai.decode(data)
    if end != len(data) or type(obj) is not dict:
        return _openai.decode(data)
    return obj


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
