"""OpenAI chunk and body encoding, with everything per-request pre-encoded.

A content event is ``prefix + json_string(token) + suffix``: the prefix and
suffix are built once per request and token strings are memoised, so the
per-token cost is two byte concatenations.  The role and finish events are put
together from the same pieces (only the usage chunk and the ``x_llmload`` timings
go through ``json.dumps``).
"""

from __future__ import annotations

import json
import time
from typing import Any

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


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


class ChunkEncoder:
    """Builds the SSE events and the non-stream body of one request."""

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

    def content(self, text: str) -> bytes:
        """One content event."""
        return self.prefix + json_string(text) + self.suffix

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
        extra = b',"x_llmload":' + _dumps(timings) if timings is not None else b""
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
        cached_tokens: int | None = None,
    ) -> bytes:
        """The usage chunk (``choices: []``), last before ``[DONE]``."""
        obj = self._chunk([], x_llmload=timings)
        obj["usage"] = _usage(prompt_tokens, output_tokens, cached_tokens)
        return b"data: " + _dumps(obj) + b"\n\n"

    def malformed(self) -> bytes:
        """A deliberately broken event (fault injection): truncated JSON."""
        return self.prefix[: len(self.prefix) // 2] + b"\n\n"

    def body(
        self,
        text: str,
        reason: str,
        prompt_tokens: int,
        output_tokens: int,
        timings: dict[str, Any],
        cached_tokens: int | None = None,
    ) -> bytes:
        """The non-streaming response body."""
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": reason}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        obj = {
            "id": self.id,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": _usage(prompt_tokens, output_tokens, cached_tokens),
            "x_llmload": timings,
        }
        return _dumps(obj)


def error_event(message: str, type_: str, code: str | None = None) -> bytes:
    """An in-stream error (after the headers went out), OpenAI error shape."""
    err = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return b"data: " + _dumps(err) + b"\n\n"


def _usage(prompt_tokens: int, output_tokens: int, cached: int | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": prompt_tokens + output_tokens,
    }
    if cached is not None:  # a prefix cache: vLLM's --enable-prompt-tokens-details shape
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage
