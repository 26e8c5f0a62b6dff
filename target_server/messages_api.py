"""Anthropic's Messages API (``POST /v1/messages``): its stream and its body.

A stream is named events (``event: NAME``, and a ``data:`` object whose ``type``
is the same name), no ``[DONE]``:

    message_start        the message, empty, with usage.input_tokens (and
                         cache_read_input_tokens when a prefix cache served some)
    ping
    per content block, in order (one block per kind of piece the answer holds):
      content_block_start   text / thinking / tool_use (a tool_use carries the name)
      content_block_delta   text_delta / thinking_delta / input_json_delta
      content_block_stop    (a thinking block gets its signature_delta first)
    message_delta        stop_reason (end_turn, max_tokens, tool_use) and
                         usage.output_tokens; the server's own timings as x_llmload
    message_stop

An error after the stream began is an ``error`` event (``{"type": "error",
"error": {"type", "message"}}``); errors before it are Anthropic-shaped bodies,
and "the server is at capacity" is HTTP 529 ``overloaded_error`` here (429 on the
OpenAI endpoints).  The official ``anthropic`` SDK reads these streams
(``tests/integration/test_server_new_apis.py``).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from llmload.target_server.chunks import dumps, json_string
from llmload.target_server.engine import TokenPiece
from llmload.target_server.errors import ANTHROPIC_TYPES, ApiError

#: piece kind -> the content block it belongs to
_BLOCK_OF = {
    "content": "text",
    "reasoning": "thinking",
    "tool_name": "tool_use",
    "tool_args": "tool_use",
}
#: block kind -> (its delta's type, the delta's text field)
_DELTA = {
    "text": ("text_delta", "text"),
    "thinking": ("thinking_delta", "thinking"),
    "tool_use": ("input_json_delta", "partial_json"),
}
#: OpenAI finish_reason -> Anthropic stop_reason
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
#: the signature a thinking block ends with (the real API signs the thinking text)
SIGNATURE = "llmload-synthetic-signature"


def _event(name: str, obj: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + dumps({"type": name, **obj}) + b"\n\n"


class MessagesEncoder:
    """The events and the body of one ``/v1/messages`` request (``chunks.Encoder``)."""

    constant = False
    prefix = suffix = b""
    reject_status = 529

    def __init__(self, request_id: str, model: str) -> None:
        self.id = request_id
        self.model = model
        self.created = int(time.time())
        self.blocks: list[dict[str, Any]] = []  # every block so far, text joined at the end
        self.kind: str | None = None  # the open block's kind
        self.texts: list[str] = []  # the open block's text so far
        self.delta_head = b""

    def _message(self, usage: dict[str, Any], stop_reason: str | None) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }

    @staticmethod
    def _usage(prompt_tokens: int, output_tokens: int, cached: int | None) -> dict[str, Any]:
        usage: dict[str, Any] = {"input_tokens": prompt_tokens, "output_tokens": output_tokens}
        if cached is not None:
            usage["cache_read_input_tokens"] = cached
        return usage

    def opening(self, prompt_tokens: int, cached_tokens: int | None) -> bytes:
        """``message_start`` (input tokens known, output 0 so far) and a ``ping``."""
        message = self._message(self._usage(prompt_tokens, 0, cached_tokens), None)
        return _event("message_start", {"message": message}) + _event("ping", {})

    def piece(self, piece: TokenPiece) -> bytes:
        """One piece's delta, after the events that end the last block and open its own."""
        kind = _BLOCK_OF[piece.kind]
        out = b""
        if kind != self.kind or piece.kind == "tool_name":
            out = self._close()
            index = len(self.blocks)
            block: dict[str, Any]
            if kind == "text":
                block = {"type": "text", "text": ""}
            elif kind == "thinking":
                block = {"type": "thinking", "thinking": "", "signature": ""}
            else:
                name = piece.text if piece.kind == "tool_name" else ""
                block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": name}
                block["input"] = {}
            self.blocks.append(block)
            self.kind, self.texts = kind, []
            delta_type, field = _DELTA[kind]
            self.delta_head = (
                b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
                b'"delta":{"type":"%s","%s":' % (index, delta_type.encode(), field.encode())
            )
            out += _event("content_block_start", {"index": index, "content_block": dict(block)})
            if piece.kind == "tool_name":  # the name is in the block: no delta of its own
                return out
        self.texts.append(piece.text)
        return out + self.delta_head + json_string(piece.text) + b"}}\n\n"

    def _close(self) -> bytes:
        """The events that end the open block, its text kept in ``blocks``."""
        kind, text = self.kind, "".join(self.texts)
        if kind is None:
            return b""
        index = len(self.blocks) - 1
        block = self.blocks[index]
        out = b""
        if kind == "text":
            block["text"] = text
        elif kind == "thinking":
            block["thinking"], block["signature"] = text, SIGNATURE
            delta = {"type": "signature_delta", "signature": SIGNATURE}
            out = _event("content_block_delta", {"index": index, "delta": delta})
        else:
            try:
                block["input"] = json.loads(text) if text else {}
            except ValueError:
                block["input"] = {"_raw": text}
        self.kind, self.texts = None, []
        return out + _event("content_block_stop", {"index": index})

    def closing(
        self,
        reason: str,
        prompt_tokens: int,
        output_tokens: int,
        timings: dict[str, Any],
        reasoning_tokens: int = 0,
        cached_tokens: int | None = None,
    ) -> bytes:
        """The open block's end, ``message_delta`` (stop reason, usage) and ``message_stop``."""
        delta = {"stop_reason": STOP_REASONS.get(reason, reason), "stop_sequence": None}
        usage = {"output_tokens": output_tokens}
        return (
            self._close()
            + _event("message_delta", {"delta": delta, "usage": usage, "x_llmload": timings})
            + _event("message_stop", {})
        )

    def body(
        self,
        pieces: list[TokenPiece],
        reason: str,
        prompt_tokens: int,
        output_tokens: int,
        timings: dict[str, Any],
        cached_tokens: int | None = None,
    ) -> bytes:
        """The non-streaming message, from the pieces generated."""
        for p in pieces:
            if p.text:
                self.piece(p)
        self._close()
        usage = self._usage(prompt_tokens, output_tokens, cached_tokens)
        message = self._message(usage, STOP_REASONS.get(reason, reason))
        message["content"] = self.blocks
        message["x_llmload"] = timings
        return dumps(message)

    def error_event(self, err: ApiError) -> bytes:
        """An ``error`` event (Anthropic's shape)."""
        error = {"type": ANTHROPIC_TYPES.get(err.status, "api_error"), "message": err.message}
        return _event("error", {"error": error})

    def error_payload(self, err: ApiError) -> bytes:
        return err.payload(anthropic=True)

    def malformed(self) -> bytes:
        """A deliberately broken event (fault injection): truncated JSON."""
        return b'event: content_block_delta\ndata: {"type":"content_block_delta","ind\n\n'
