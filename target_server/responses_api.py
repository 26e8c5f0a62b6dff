"""The OpenAI Responses API (``POST /v1/responses``): its stream, its body, its history.

A stream is named events (``event: NAME`` and a ``data:`` object whose ``type``
is the same name), each with the next ``sequence_number``, and no ``[DONE]``:

    response.created, response.in_progress
    per output item, in order (one item per kind of piece the answer holds):
      response.output_item.added
      a message:   response.content_part.added, response.output_text.delta ...,
                   response.output_text.done, response.content_part.done
      reasoning:   the same with reasoning_text parts (response.reasoning_text.delta)
      a tool call: response.function_call_arguments.delta ..., ...arguments.done
                   (the call's name is in the item that output_item.added carries)
      response.output_item.done
    response.completed (or response.incomplete when max_output_tokens cut the
    answer), its ``response`` carrying every item and ``usage``; the event also
    carries the server's own timings as ``x_llmload``, as the chat stream's last
    chunk does

An error after the stream began is ``response.failed`` with the response's
``error``.  The shapes follow OpenAI's published event types; the official
``openai`` SDK reads them (``tests/integration/test_server_new_apis.py``).

``previous_response_id``: a stored response's conversation (its input and its
answer) is kept in ``ResponseStore``, so a follow-up sends only its new turn.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from typing import Any

from llmload.target_server.chunks import dumps, json_string
from llmload.target_server.engine import TokenPiece
from llmload.target_server.errors import ApiError

#: piece kind -> the output item it belongs to
_ITEM_OF = {
    "content": "message",
    "reasoning": "reasoning",
    "tool_name": "function_call",
    "tool_args": "function_call",
}
#: how many finished conversations a server keeps for ``previous_response_id``
STORE_SIZE = 10_000


class ResponseStore:
    """The conversations of stored responses, by response id (the oldest dropped first)."""

    def __init__(self, size: int = STORE_SIZE) -> None:
        self.size = size
        self._kept: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    def put(self, response_id: str, messages: list[dict[str, Any]]) -> None:
        self._kept[response_id] = messages
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)

    def get(self, response_id: str) -> list[dict[str, Any]] | None:
        """The conversation up to and with that response's answer, or None (unknown)."""
        return self._kept.get(response_id)


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


class _Item:
    """One output item while it is written: its id, index and text so far."""

    __slots__ = ("kind", "id", "index", "texts", "name", "call_id", "delta_head")

    def __init__(self, kind: str, index: int, name: str = "") -> None:
        self.kind = kind
        self.id = _new_id({"message": "msg_", "reasoning": "rs_", "function_call": "fc_"}[kind])
        self.index = index
        self.texts: list[str] = []
        self.name = name
        self.call_id = "call_" + self.id[3:]
        delta = {
            "message": "response.output_text.delta",
            "reasoning": "response.reasoning_text.delta",
            "function_call": "response.function_call_arguments.delta",
        }[kind]
        content = '"content_index":0,' if kind != "function_call" else ""
        self.delta_head = (
            f'event: {delta}\ndata: {{"type":"{delta}","item_id":"{self.id}",'
            f'"output_index":{index},{content}"delta":'
        ).encode()

    @property
    def text(self) -> str:
        return "".join(self.texts)

    def part(self) -> dict[str, Any]:
        """The item's content part as it stands (message and reasoning items)."""
        if self.kind == "message":
            return {"type": "output_text", "text": self.text, "annotations": [], "logprobs": []}
        return {"type": "reasoning_text", "text": self.text}

    def item(self, status: str) -> dict[str, Any]:
        """The output item as ``output_item.added`` / ``.done`` and the response carry it."""
        done = status == "completed"
        if self.kind == "function_call":
            return {
                "type": "function_call",
                "id": self.id,
                "call_id": self.call_id,
                "name": self.name,
                "arguments": self.text if done else "",
                "status": status,
            }
        content = [self.part()] if done else []
        if self.kind == "message":
            return {
                "type": "message",
                "id": self.id,
                "role": "assistant",
                "status": status,
                "content": content,
            }
        return {"type": "reasoning", "id": self.id, "summary": [], "content": content}


class ResponsesEncoder:
    """The events and the body of one ``/v1/responses`` request (``chunks.Encoder``)."""

    constant = False
    prefix = suffix = b""
    reject_status = 429

    def __init__(
        self,
        request_id: str,
        model: str,
        history: list[dict[str, Any]],
        store: ResponseStore | None,
        previous_response_id: str | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        self.id = request_id
        self.model = model
        self.created = int(time.time())
        self.seq = 0
        self.items: list[_Item] = []
        self.current: _Item | None = None
        # the conversation so far (no system message), kept with the answer when stored
        self.history = history
        self.store = store
        self.previous = previous_response_id
        self.max_output_tokens = max_output_tokens

    # -- the stream ----------------------------------------------------------------------

    def _event(self, name: str, fields: dict[str, Any]) -> bytes:
        obj = {"type": name, **fields, "sequence_number": self.seq}
        self.seq += 1
        return b"event: " + name.encode() + b"\ndata: " + dumps(obj) + b"\n\n"

    def response(self, status: str, **extra: Any) -> dict[str, Any]:
        """The response object (``output`` as it stands)."""
        done = status in ("completed", "incomplete")
        obj: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": [i.item("completed") for i in self.items] if done else [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "previous_response_id": self.previous,
            "max_output_tokens": self.max_output_tokens,
            "error": None,
            "incomplete_details": None,
            "usage": None,
        }
        obj.update(extra)
        return obj

    def opening(self, prompt_tokens: int, cached_tokens: int | None) -> bytes:
        """``response.created`` and ``response.in_progress``."""
        return self._event("response.created", {"response": self.response("in_progress")}) + (
            self._event("response.in_progress", {"response": self.response("in_progress")})
        )

    def piece(self, piece: TokenPiece) -> bytes:
        """The delta event of one piece, after the events that open its item."""
        kind = _ITEM_OF[piece.kind]
        out = b""
        item = self.current
        if item is None or item.kind != kind or piece.kind == "tool_name":
            out = self._close()
            name = piece.text if piece.kind == "tool_name" else ""
            item = self.current = _Item(kind, len(self.items), name)
            self.items.append(item)
            out += self._event(
                "response.output_item.added",
                {"output_index": item.index, "item": item.item("in_progress")},
            )
            if kind != "function_call":
                empty = {"message": {"type": "output_text", "text": "", "annotations": []}}
                part = empty.get(kind, {"type": "reasoning_text", "text": ""})
                at = {"item_id": item.id, "output_index": item.index, "content_index": 0}
                out += self._event("response.content_part.added", {**at, "part": part})
            if piece.kind == "tool_name":  # the name is in the item: no delta of its own
                return out
        item.texts.append(piece.text)
        seq = self.seq
        self.seq += 1
        tail = (
            b',"logprobs":[],"sequence_number":%d}\n\n'
            if kind == "message"
            else (b',"sequence_number":%d}\n\n')
        )
        return out + item.delta_head + json_string(piece.text) + tail % seq

    def _close(self) -> bytes:
        """The events that finish the current item (nothing when there is none)."""
        item, self.current = self.current, None
        if item is None:
            return b""
        at = {"item_id": item.id, "output_index": item.index}
        if item.kind == "function_call":
            out = self._event(
                "response.function_call_arguments.done",
                {**at, "name": item.name, "arguments": item.text},
            )
        else:
            done = (
                "response.output_text.done"
                if item.kind == "message"
                else ("response.reasoning_text.done")
            )
            out = self._event(done, {**at, "content_index": 0, "text": item.text})
            out += self._event(
                "response.content_part.done", {**at, "content_index": 0, "part": item.part()}
            )
        return out + self._event(
            "response.output_item.done",
            {"output_index": item.index, "item": item.item("completed")},
        )

    def closing(
        self,
        reason: str,
        prompt_tokens: int,
        output_tokens: int,
        timings: dict[str, Any],
        reasoning_tokens: int = 0,
        cached_tokens: int | None = None,
    ) -> bytes:
        """The open item's end, then ``response.completed`` (or ``.incomplete``)."""
        out = self._close()
        final = self._final(reason, prompt_tokens, output_tokens, reasoning_tokens, cached_tokens)
        name = f"response.{final['status']}"
        return out + self._event(name, {"response": final, "x_llmload": timings})

    def _final(
        self,
        reason: str,
        prompt_tokens: int,
        output_tokens: int,
        reasoning_tokens: int,
        cached_tokens: int | None,
    ) -> dict[str, Any]:
        """The finished response object (and the conversation kept when stored)."""
        usage = {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": cached_tokens or 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": prompt_tokens + output_tokens,
        }
        incomplete = reason == "length"
        final = self.response(
            "incomplete" if incomplete else "completed",
            usage=usage,
            incomplete_details={"reason": "max_output_tokens"} if incomplete else None,
        )
        if self.store is not None:
            answer = "".join(i.text for i in self.items if i.kind == "message")
            self.store.put(self.id, [*self.history, {"role": "assistant", "content": answer}])
        return final

    # -- a whole body, errors, faults ------------------------------------------------------

    def body(
        self,
        pieces: list[TokenPiece],
        reason: str,
        prompt_tokens: int,
        output_tokens: int,
        timings: dict[str, Any],
        cached_tokens: int | None = None,
    ) -> bytes:
        """The non-streaming response object, from the pieces generated."""
        for p in pieces:
            if p.text:
                self.piece(p)
        self.current = None
        reasoning = sum(1 for p in pieces if p.kind == "reasoning")
        final = self._final(reason, prompt_tokens, output_tokens, reasoning, cached_tokens)
        final["x_llmload"] = timings
        return dumps(final)

    def error_event(self, err: ApiError) -> bytes:
        """``response.failed``: the response, with its ``error``."""
        error = {"code": err.code or err.type, "message": err.message}
        return self._event("response.failed", {"response": self.response("failed", error=error)})

    def error_payload(self, err: ApiError) -> bytes:
        return err.payload()

    def malformed(self) -> bytes:
        """A deliberately broken event (fault injection): truncated JSON."""
        return b'event: response.output_text.delta\ndata: {"type":"response.output_text.d\n\n'


def history_of(messages: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """What a stored response keeps of its input: the turns, without the instructions."""
    return [m for m in messages or () if m.get("role") != "system"]
