"""OpenAI chunk and body encoding, with everything per-request pre-encoded.

Every generation API has an encoder with the same face (``Encoder``): this
module's ``ChunkEncoder`` for chat and completions, ``responses_api`` and
``messages_api`` for the Responses and Messages APIs.

A content event is ``prefix + json_string(token) + suffix``: the prefix and
suffix are built once per request and token strings are memoised, so the
per-token cost is two byte concatenations.  The role and finish events are put
together from the same pieces (only the usage chunk and the ``x_llmload`` timings
go through ``json.dumps``).

A chat answer's other pieces (``engine.PieceKind``) are written in vLLM's shapes:
reasoning as ``{"reasoning_content": ...}``; a tool call as a first delta with the
call's ``index``, ``id``, ``type`` and ``function.name`` (``arguments`` empty), then one
delta per piece of ``function.arguments`` (``content`` null throughout; the finish
event says ``tool_calls``).  The non-stream body carries the same in ``message``.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

from llmload.target_server.engine import TokenPiece
from llmload.target_server.errors import ApiError
from llmload.target_server.schemas import CHAT

DONE = b"data: [DONE]\n\n"
_TOKEN_CACHE: dict[str, bytes] = {}
_TOKEN_CACHE_MAX = 65536


def json_string(text: str) -> bytes:
    """``json.dumps(text)`` as UTF-8 bytes, memoised (token strings repeat)."""
    enc = _TOKEN_CACHE.get(text)
    if enc is None:
        if len(_TOKEN_CACHE) >= _TOKEN_CACHE_MAX:
            _TOKEN_CACHE.clear()
        enc = _TOKEN_CACHE[text] = json.dumps(text, ensure_ascii=False).encode()
    return enc


def dumps(obj: Any) -> bytes:
    """Compact JSON as UTF-8 bytes."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


class Encoder(Protocol):
    """What the generation call asks of a protocol's encoder (one per request).

    ``constant``: a content piece's event is always ``prefix + json_string(text) +
    suffix`` (the pacer's tick then writes it without a call); otherwise each piece
    goes through ``piece``, which may keep state (the item or block it is in, a
    sequence number).  ``opening`` is what a stream starts with, ``closing`` what it
    ends with once the last piece went out (usage, timings, end marker).
    """

    constant: bool
    prefix: bytes
    suffix: bytes
    #: HTTP status of "the server is at capacity" (Anthropic's API says 529)
    reject_status: int

    def opening(self, prompt_tokens: int, cached_tokens: int | None) -> bytes: ...

    def piece(self, piece: TokenPiece) -> bytes: ...

    def closing(
        self,
        reason: str,
        prompt_tokens: int,
        output_tokens: int,
        timings: dict[str, Any],
        reasoning_tokens: int = 0,
        cached_tokens: int | None = None,
    ) -> bytes: ...

    def body(
        self,
        pieces: list[TokenPiece],
        reason: str,
        prompt_tokens: int,
        output_tokens: int,
        timings: dict[str, Any],
        cached_tokens: int | None = None,
    ) -> bytes: ...

    def error_event(self, err: ApiError) -> bytes: ...

    def error_payload(self, err: ApiError) -> bytes: ...

    def malformed(self) -> bytes: ...


class ChunkEncoder:
    """Builds the SSE events and the non-stream body of one chat or completions request."""

    constant = True
    reject_status = 429

    def __init__(self, endpoint: str, request_id: str, model: str, include_usage: bool):
        self.chat = endpoint == CHAT
        self.id = request_id
        self.model = model
        self.created = int(time.time())
        self.include_usage = include_usage
        self.object = "chat.completion.chunk" if self.chat else "text_completion"
        head = (
            f'data: {{"id":{json.dumps(request_id)},"object":"{self.object}",'
            f'"created":{self.created},"model":{json.dumps(model)},"choices":[{{"index":0,'
        ).encode()
        self.head = head
        self.prefix = head + (b'"delta":{"content":' if self.chat else b'"text":')
        tail = b',"logprobs":null,"finish_reason":null}]'
        self.usage_null = b',"usage":null' if include_usage else b""
        self.suffix = (b"}" if self.chat else b"") + tail + self.usage_null + b"}\n\n"
        self.call_id = "call_" + request_id.rpartition("-")[2]
        tool = b'"delta":{"content":null,"tool_calls":[{"index":0,'
        #: kind -> (prefix, suffix) around the piece's JSON string (chat's other pieces)
        self.shapes: dict[str, tuple[bytes, bytes]] = {
            "content": (self.prefix, self.suffix),
            "reasoning": (head + b'"delta":{"reasoning_content":', self.suffix),
            "tool_name": (
                head
                + tool
                + b'"id":'
                + json_string(self.call_id)
                # the name's own bytes come between: '"function":{"name":NAME,"arguments":""}'
                + b',"type":"function","function":{"name":',
                b',"arguments":""}}]}' + tail + self.usage_null + b"}\n\n",
            ),
            "tool_args": (
                head + tool + b'"function":{"arguments":',
                b"}}]}" + tail + self.usage_null + b"}\n\n",
            ),
        }

    def content(self, text: str) -> bytes:
        """One content event."""
        return self.prefix + json_string(text) + self.suffix

    def piece(self, piece: TokenPiece) -> bytes:
        """The event of one piece of any kind (a completions stream: always its text)."""
        prefix, suffix = self.shapes[piece.kind] if self.chat else (self.prefix, self.suffix)
        return prefix + json_string(piece.text) + suffix

    def opening(self, prompt_tokens: int, cached_tokens: int | None) -> bytes:
        """A chat stream's role event (a completions stream starts with its first token)."""
        return self.role() if self.chat else b""

    def closing(
        self,
        reason: str,
        prompt_tokens: int,
        output_tokens: int,
        timings: dict[str, Any],
        reasoning_tokens: int = 0,
        cached_tokens: int | None = None,
    ) -> bytes:
        """The finish event, the usage chunk when asked for, and ``[DONE]``."""
        if not self.include_usage:
            return self.finish(reason, timings) + DONE
        usage = self.usage(prompt_tokens, output_tokens, timings, reasoning_tokens, cached_tokens)
        return self.finish(reason, None) + usage + DONE

    def error_event(self, err: ApiError) -> bytes:
        """An error after the stream began."""
        return error_event(err.message, err.type, err.code)

    def error_payload(self, err: ApiError) -> bytes:
        """An error answered instead of a stream or body."""
        return err.payload()

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if self.include_usage:
            obj["usage"] = None
        obj.update(extra)
        return obj

    def role(self) -> bytes:
        """The first chat event: the assistant role with empty content."""
        return (
            self.head + b'"delta":{"role":"assistant","content":""},"logprobs":null,'
            b'"finish_reason":null}]' + self.usage_null + b"}\n\n"
        )

    def finish(self, reason: str, timings: dict[str, Any] | None) -> bytes:
        """The finish event (carries ``x_llmload`` when no usage chunk follows)."""
        empty = b'"delta":{}' if self.chat else b'"text":""'
        extra = b',"x_llmload":' + dumps(timings) if timings is not None else b""
        return (
            self.head
            + b'"logprobs":null,"finish_reason":'
            + json_string(reason)
            + b","
            + empty
            + b"}]"
            + self.usage_null
            + extra
            + b"}\n\n"
        )

    def usage(
        self,
        prompt_tokens: int,
        output_tokens: int,
        timings: dict[str, Any],
        reasoning_tokens: int = 0,
        cached_tokens: int | None = None,
    ) -> bytes:
        """The usage chunk (``choices: []``), last before ``[DONE]``."""
        obj = self._chunk([], x_llmload=timings)
        obj["usage"] = _usage(prompt_tokens, output_tokens, reasoning_tokens, cached_tokens)
        return b"data: " + dumps(obj) + b"\n\n"

    def malformed(self) -> bytes:
        """A deliberately broken event (fault injection): truncated JSON."""
        return self.prefix[: len(self.prefix) // 2] + b"\n\n"

    def body(
        self,
        pieces: list[TokenPiece],
        reason: str,
        prompt_tokens: int,
        output_tokens: int,
        timings: dict[str, Any],
        cached_tokens: int | None = None,
    ) -> bytes:
        """The non-streaming response body, from the pieces generated."""
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": reason}
        reasoning = 0
        if self.chat:
            choice["message"], reasoning = self._message(pieces)
        else:
            choice["text"] = "".join(p.text for p in pieces)
        obj = {
            "id": self.id,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": _usage(prompt_tokens, output_tokens, reasoning, cached_tokens),
            "x_llmload": timings,
        }
        return dumps(obj)

    def _message(self, pieces: list[TokenPiece]) -> tuple[dict[str, Any], int]:
        """A chat body's ``message`` (vLLM's shape) and its reasoning token count."""
        texts: dict[str, list[str]] = {}
        for p in pieces:
            texts.setdefault(p.kind, []).append(p.text)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(texts.get("content", ())),
        }
        if "reasoning" in texts:
            message["reasoning_content"] = "".join(texts["reasoning"])
        if "tool_name" in texts:
            message["content"] = message["content"] or None
            function = {
                "name": texts["tool_name"][0],
                "arguments": "".join(texts.get("tool_args", ())),
            }
            message["tool_calls"] = [{"id": self.call_id, "type": "function", "function": function}]
        return message, len(texts.get("reasoning", ()))


def error_event(message: str, type_: str, code: str | None = None) -> bytes:
    """An in-stream error (after the headers went out), OpenAI error shape."""
    err = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return b"data: " + dumps(err) + b"\n\n"


def _usage(
    prompt_tokens: int, output_tokens: int, reasoning_tokens: int = 0, cached: int | None = None
) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": prompt_tokens + output_tokens,
    }
    if reasoning_tokens:  # as OpenAI reports it: part of completion_tokens
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    if cached is not None:  # a prefix cache: vLLM's --enable-prompt-tokens-details shape
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage
