"""Shared pieces of the two OpenAI adapters: request options, usage, errors, ``x_llmload``."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import orjson

from llmload.loadtests.measure.adapters.base import EventInfo, HttpCall, Prompt
from llmload.loadtests.measure.record import Mode

#: request options the OpenAI adapters understand (``options`` of ``Adapter.build``)
OPTION_KEYS = frozenset(
    {"temperature", "top_p", "seed", "ignore_eos", "min_tokens", "stop", "extra_body", "headers"}
)
_DONE = EventInfo(done=True)
_EMPTY = EventInfo()
_decode_str = json.JSONDecoder().decode  # json.loads minus its per-call type checks
#: the content-only fast path's decoder (faster than json's: docs/scale.md, "After (2)");
#: see ``parse_sse``
_fast_loads = orjson.loads
#: content-only events, memoised by text (tokens repeat; EventInfo is immutable)
_PLAIN: dict[str, EventInfo] = {}
_PLAIN_MAX = 8192
#: what the fast path may meet on data it leaves to the full path
_FAST_MISSES = (ValueError, TypeError, KeyError, AttributeError, IndexError)


def apply_options(body: dict[str, Any], options: dict[str, Any]) -> dict[str, str]:
    """Merge ``options`` into the JSON body in place; return extra request headers."""
    unknown = set(options) - OPTION_KEYS
    if unknown:
        raise ValueError(
            f"unknown request option(s) {sorted(unknown)}; supported: {sorted(OPTION_KEYS)}"
        )
    for key in ("temperature", "top_p", "seed", "ignore_eos", "min_tokens", "stop"):
        value = options.get(key)
        if value is not None:
            body[key] = value
    extra = options.get("extra_body")
    if extra:
        body.update(extra)
    return dict(options.get("headers") or {})


def build_call(
    endpoint: str,
    field: str,
    value: Any,
    prompt: Prompt,
    mode: Mode,
    model: str,
    options: dict[str, Any],
) -> HttpCall:
    """The POST both adapters send: ``field`` (``messages`` or ``prompt``) plus the common keys;
    streaming asks for usage in the last chunk."""
    body: dict[str, Any] = {
        "model": model,
        field: value,
        "max_tokens": prompt.max_tokens,
        "stream": mode == "stream",
    }
    if mode == "stream":
        body["stream_options"] = {"include_usage": True}
    if prompt.min_tokens:
        body["min_tokens"] = prompt.min_tokens  # vLLM/SGLang extension; exact output lengths
    if prompt.tools:
        body["tools"] = list(prompt.tools)
    if prompt.tool_choice:
        body["tool_choice"] = prompt.tool_choice
    headers = apply_options(body, options)
    return HttpCall("POST", endpoint, body, headers, stream=mode == "stream")


def error_text(err: Any) -> str:
    """The message of an OpenAI-style ``error`` value (object or string)."""
    if isinstance(err, dict):
        msg = err.get("message") or err.get("msg") or json.dumps(err, ensure_ascii=False)
        kind = err.get("type") or err.get("code")
        return f"{kind}: {msg}" if kind and kind not in str(msg) else str(msg)
    return str(err)


def decode(data: str | bytes) -> dict[str, Any]:
    """JSON object or ``ValueError`` (the timing core's ``protocol`` class)."""
    obj = json.loads(data)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def server_timings(obj: dict[str, Any]) -> dict[str, float] | None:
    """The bundled server's ``x_llmload`` block (``queue_s``, ``ttft_s``, ``e2e_s``), if any."""
    x = obj.get("x_llmload")
    if not isinstance(x, dict):
        return None
    return {k: float(v) for k, v in x.items() if isinstance(v, int | float)}


def plain(content: str) -> EventInfo:
    """The ``EventInfo`` of a chunk that carries only ``content`` (memoised)."""
    info = _PLAIN.get(content)
    if info is None:
        if len(_PLAIN) >= _PLAIN_MAX:
            _PLAIN.clear()
        info = _PLAIN[content] = EventInfo(content=content)
    return info


#: what a ``content_of`` function returns: the event's new text, and for an event that is
#: not plain answer text the ``EventInfo`` fields that say what it is (``reasoning``,
#: ``answer``, ``tool_calls``), else None
Content = tuple[str, dict[str, Any] | None]


def _count(value: Any) -> int | None:
    """A token count from ``usage`` (an integer), else None."""
    return value if type(value) is int else None


def _detail(usage: dict[str, Any], block: str, key: str) -> int | None:
    """``usage[block][key]`` as a count (``completion_tokens_details.reasoning_tokens``)."""
    details = usage.get(block)
    return _count(details.get(key)) if isinstance(details, dict) else None


def info_from(
    obj: dict[str, Any], content: str, shape: dict[str, Any] | None, finish_reason: str | None
) -> EventInfo:
    """Assemble the ``EventInfo`` of one decoded chunk or body (``shape``: see ``Content``)."""
    usage = obj.get("usage")
    out_tokens = prompt_tokens = reasoning_tokens = cached_tokens = None
    if isinstance(usage, dict):
        out_tokens = usage.get("completion_tokens")
        prompt_tokens = usage.get("prompt_tokens")
        reasoning_tokens = _detail(usage, "completion_tokens_details", "reasoning_tokens")
        cached_tokens = _detail(usage, "prompt_tokens_details", "cached_tokens")
    server = server_timings(obj) if "x_llmload" in obj else None
    if out_tokens is None and not server and not finish_reason and not shape:
        return plain(content) if content else _EMPTY
    return EventInfo(
        content=content,
        **(shape or {}),
        usage_output_tokens=out_tokens,
        usage_prompt_tokens=prompt_tokens,
        usage_reasoning_tokens=reasoning_tokens,
        usage_cached_tokens=cached_tokens,
        server=server,
        finish_reason=finish_reason,
    )


class Template:
    """A stream's chunk skeleton: the text around its content string, learnt from one chunk.

    An OpenAI stream's content chunks differ only in their text (the id,
    model, created time and the rest repeat within a request).  Once one plain
    chunk has been read, ``prefix`` is everything up to and including the
    opening quote of its content string and ``suffix`` everything from the
    closing quote on; a later chunk made of prefix, a string body and suffix is
    the same object with another text, so its text is read without decoding
    anything.  The skeleton is accepted only after the full path has read it
    back, a marker text in place of the content, as a plain chunk with exactly
    that text (so the string is the delta's content, not some other value).
    One per adapter instance (one request at a time, ``Adapter``'s contract).
    A server whose chunks change elsewhere too (a counter, a timestamp) never
    fits; learning then backs off (tried on the 1st, 2nd, 4th, ... 64th missed
    chunk, then every 64th), so it costs such a stream little.
    """

    __slots__ = ("key", "prefix", "suffix", "misses")

    def __init__(self, key: str) -> None:
        self.key = key  # the content string's key, as compact JSON writes it: '"content":"'
        self.prefix = ""
        self.suffix = ""
        self.misses = 0  # plain chunks that did not fit since the last one that did

    def read(self, data: str) -> str | None:
        """The chunk's text when ``data`` fits the skeleton and the text needs no decoding."""
        prefix = self.prefix
        if not prefix or not data.startswith(prefix) or not data.endswith(self.suffix):
            return None
        end = len(data) - len(self.suffix)
        if end < len(prefix):
            return None
        text = data[len(prefix) : end]
        # a JSON string body as is: no quote, no escape, no control character (isprintable
        # also refuses a few characters JSON allows: those take the decoding path)
        if '"' in text or "\\" in text or not text.isprintable():
            return None
        self.misses = 0
        return text

    def learn(self, data: str, content: str, content_of: Any) -> None:
        """Take ``data``'s skeleton if its content string is ``content``, written as is."""
        self.misses = misses = self.misses + 1
        if misses & (misses - 1) and misses % 64:  # not 1, 2, 4, ... 64, nor a multiple of 64
            return
        key = self.key
        i = data.find(key)
        if i < 0 or data.find(key, i + 1) >= 0 or not content.isprintable():
            return
        start = i + len(key)
        end = start + len(content)
        if data[start:end] != content or data[end : end + 1] != '"':
            return
        prefix, suffix = data[:start], data[end:]
        if prefix == self.prefix and suffix == self.suffix:
            return
        try:
            info = _parse_full(None, prefix + _MARK + suffix, content_of)
        except _FAST_MISSES:
            return
        if info == EventInfo(content=_MARK):
            self.prefix, self.suffix = prefix, suffix


#: the marker text a skeleton is checked with (printable, nothing to escape)
_MARK = "llmload-template-check"


def parse_sse(
    event: str | None, data: str, content_of: Any, template: Template | None = None
) -> EventInfo:
    """Common ``parse_event``: ``[DONE]``, error objects, then ``content_of(choice)``.

    Fast paths first, for the usual chunk, which carries text and nothing else
    the record reads (no usage, finish_reason, server timings or error):

    1. ``template`` (the stream's skeleton, ``Template``): the text is cut out
       of a chunk that fits it, without decoding the JSON;
    2. orjson (faster than json): when the decoded chunk is such a chunk, its text is
       returned straight away (and its skeleton learnt).

    Anything else — another shape, or JSON orjson reads differently from
    ``json`` (integers past 64 bits become floats, NaN/Infinity and lone
    surrogates are errors) — is decoded again by ``json`` and read by the full
    path, so every value the record keeps comes from ``json.loads`` as before;
    text strings are the same from both decoders.
    """
    if data == "[DONE]":
        return _DONE
    if event is None:
        if template is not None:
            text = template.read(data)
            if text is not None:
                return plain(text) if text else _EMPTY
        try:
            info = _fast_plain(data, content_of, template)
        except _FAST_MISSES:  # the full path below reads it (and says what is wrong)
            info = None
        if info is not None:
            return info
    return _parse_full(event, data, content_of)


def _fast_plain(data: str, content_of: Any, template: Template | None) -> EventInfo | None:
    """orjson's reading of a plain text chunk (``parse_sse``'s second fast path), else None."""
    obj = _fast_loads(data)
    if (
        type(obj) is dict
        and not obj.get("error")
        and obj.get("usage") is None
        and obj.get("x_llmload") is None
        and obj.get("object") != "error"
    ):
        choices = obj.get("choices")
        if type(choices) is list and choices:
            choice = choices[0]
            if type(choice) is dict and choice.get("finish_reason") is None:
                content, shape = content_of(choice)
                if shape:
                    return EventInfo(content=content, **shape)
                if not content:
                    return _EMPTY
                if template is not None:
                    template.learn(data, content, content_of)
                return plain(content)
    return None


def _parse_full(event: str | None, data: str, content_of: Any) -> EventInfo:
    """``parse_sse`` without its fast paths: every value from ``json.loads``."""
    if data == "[DONE]":
        return _DONE
    if event == "error":  # some gateways name their error events
        try:
            obj = json.loads(data)
        except ValueError:
            return EventInfo(error=data or "error event")
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        return EventInfo(error=error_text(err))
    obj = _decode_str(data)
    if type(obj) is not dict:
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    err = obj.get("error")
    if err:
        return EventInfo(error=error_text(err))
    if obj.get("object") == "error":  # an unwrapped error object (older vLLM)
        return EventInfo(error=error_text(obj))
    choices = obj.get("choices")
    content: str = ""
    shape: dict[str, Any] | None = None
    finish = None
    if choices:
        choice = choices[0]
        if type(choice) is not dict:
            raise ValueError("choices[0] is not an object")
        content, shape = content_of(choice)
        finish = choice.get("finish_reason")
    return info_from(obj, content, shape, finish)


def parse_json_body(body: bytes, content_of: Any) -> EventInfo:
    """Common ``parse_body`` for a non-streaming response."""
    obj = decode(body)
    if "error" in obj and obj["error"]:
        return EventInfo(error=error_text(obj["error"]), done=True)
    if obj.get("object") == "error":  # an unwrapped error object (older vLLM)
        return EventInfo(error=error_text(obj), done=True)
    if "detail" in obj and "choices" not in obj:  # FastAPI-style error body
        return EventInfo(error=error_text(obj["detail"]), done=True)
    choices = obj.get("choices")
    if not isinstance(choices, list):
        raise ValueError("response has no 'choices' list")
    content: str = ""
    shape: dict[str, Any] | None = None
    finish = None
    if choices:
        choice = choices[0]
        if not isinstance(choice, dict):
            raise ValueError("choices[0] is not an object")
        content, shape = content_of(choice)
        finish = choice.get("finish_reason")
    return dataclasses.replace(info_from(obj, content, shape, finish), done=True)
