"""OpenAI's Responses API (``/v1/responses``), streaming and sync.

A stream is named events, no ``[DONE]``; the ones that carry content:

* ``response.output_text.delta`` — answer text (``delta``);
* ``response.reasoning_text.delta`` / ``response.reasoning_summary_text.delta`` —
  reasoning (content, not output: TTFO waits for the answer);
* ``response.output_item.added`` of a ``function_call`` item — the call's name, and
  ``response.function_call_arguments.delta`` its argument pieces (a tool call,
  counted by its ``output_index``).

``response.completed`` ends the stream (``done``) with ``usage`` (``input_tokens``,
``output_tokens``, ``input_tokens_details.cached_tokens``,
``output_tokens_details.reasoning_tokens``); ``response.incomplete`` ends it cut
short (``finish_reason`` "length" when ``max_output_tokens`` did it); ``response.failed``
and ``error`` are server errors (``protocol``).  Every other event the API defines
carries nothing the record keeps; one it does not define is skipped and counted
(``unknown_events``).  A stream that ends without ``response.completed`` is a
``disconnect`` that says so.

A conversation's later turns are sent one of two ways (``chain``): ``resend`` (the
default) sends the whole history as ``input``, as chat does, with ``store: false``;
``previous`` sends only the new turn with ``previous_response_id`` (the last
answer's id; the server keeps the history), so a prefix cache sees the server's
own copy of the conversation instead of the client's.
"""

from __future__ import annotations

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
from llmload.loadtests.options import RESPONSES_CHAINS

#: how a conversation's later turns are sent (module docstring; ``--responses-chain``)
CHAINS = RESPONSES_CHAINS
#: the events the API defines that carry nothing the record keeps (most of a stream's
#: events that are not text: checked first)
_QUIET = frozenset(
    {
        "response.created",
        "response.in_progress",
        "response.queued",
        "response.output_item.done",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.done",
        "response.output_text.annotation.added",
        "response.refusal.delta",
        "response.refusal.done",
        "response.reasoning_text.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.done",
        "response.function_call_arguments.done",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
        "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done",
        "response.image_generation_call.in_progress",
        "response.image_generation_call.generating",
        "response.image_generation_call.partial_image",
        "response.image_generation_call.completed",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.mcp_call.failed",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_list_tools.failed",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
    }
)
_REASONING_DELTAS = frozenset(
    {"response.reasoning_text.delta", "response.reasoning_summary_text.delta"}
)
_TEXT_DELTA = "response.output_text.delta"
#: a stream without event lines (LiteLLM's proxy): the fast path's sieve on the data
_TEXT_TYPE = '"type":"response.output_text.delta"'


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "input_text", "text": text}


def _image_part(url: str) -> dict[str, Any]:
    return {"type": "input_image", "image_url": url}


def _input(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Chat messages as (``instructions``, ``input`` items)."""
    system = [str(m.get("content") or "") for m in messages if m.get("role") == "system"]
    items = [
        {"role": m.get("role", "user"), "content": m.get("content") or ""}
        for m in messages
        if m.get("role") != "system"
    ]
    return ("\n\n".join(system) if system else None), items


def _tools(tools: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """Chat ``tools`` in the Responses API's flattened form."""
    out = []
    for tool in tools:
        function = tool.get("function") or {}
        flat = {"type": "function", "name": function.get("name")}
        for key in ("description", "parameters", "strict"):
            if key in function:
                flat[key] = function[key]
        out.append(flat)
    return out


def _finish(response: dict[str, Any], status: str) -> str:
    """The chat word for how the answer ended: stop, length, tool_calls, or the reason."""
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return "length" if reason in (None, "max_output_tokens") else str(reason)
    output = response.get("output")
    if isinstance(output, list) and any(
        isinstance(i, dict) and i.get("type") == "function_call" for i in output
    ):
        return "tool_calls"
    return "stop"


def _error(err: Any) -> str:
    """The message of a response's ``error`` (``{"code", "message"}``) or an error event."""
    if isinstance(err, dict):
        code, message = err.get("code") or err.get("type"), err.get("message") or str(err)
        return f"{code}: {message}" if code and str(code) not in str(message) else str(message)
    return str(err)


def _final(response: dict[str, Any], outer: dict[str, Any], **fields: Any) -> EventInfo:
    """The ``EventInfo`` of a finished response (a terminal event's, or a sync body's)."""
    usage = response.get("usage")
    status = str(response.get("status") or "completed")
    if status == "failed":
        return EventInfo(error=_error(response.get("error") or "response failed"), done=True)
    return EventInfo(
        usage_output_tokens=_named.count(usage, "output_tokens"),
        usage_prompt_tokens=_named.count(usage, "input_tokens"),
        usage_reasoning_tokens=_named.count(usage, "output_tokens_details", "reasoning_tokens"),
        usage_cached_tokens=_named.count(usage, "input_tokens_details", "cached_tokens"),
        server=_openai.server_timings(outer) or _openai.server_timings(response),
        finish_reason=_finish(response, status),
        done=True,
        **fields,
    )


@register("openai-responses")
class OpenAIResponses:
    """The Responses API: ``input`` items in, named events (or a response object) out."""

    name = "openai-responses"
    endpoint = "/v1/responses"
    end_marker = "response.completed"
    sends_messages = True

    def __init__(self) -> None:
        self.last_id: str | None = None  # the last finished response's id (``previous``)

    def build(self, prompt: Prompt, *, mode: Mode, model: str, options: dict[str, Any]) -> HttpCall:
        """The POST for this prompt (``options["chain"]``: ``resend`` or ``previous``)."""
        options = dict(options)
        chain = options.pop("chain", None) or "resend"
        if chain not in CHAINS:
            raise ValueError(f"unknown chain {chain!r}; known: {', '.join(CHAINS)}")
        messages = chat_messages(prompt)
        body: dict[str, Any] = {"model": model}
        previous = self.last_id if chain == "previous" and prompt.turn > 0 else None
        if previous is not None:
            # only what follows the last answer: the server keeps the rest
            answers = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
            last = answers[-1] if answers else -1
            kept = [m for m in messages if m.get("role") == "system"]
            messages = kept + list(messages[last + 1 :])
            body["previous_response_id"] = previous
        messages = attach_images(messages, prompt.images, _text_part, _image_part)
        instructions, items = _input(messages)
        if instructions:
            body["instructions"] = instructions
        body["input"] = items
        body["max_output_tokens"] = prompt.max_tokens
        body["stream"] = mode == "stream"
        body["store"] = chain == "previous"
        if prompt.min_tokens:
            body["min_tokens"] = prompt.min_tokens  # vLLM's extension; exact output lengths
        if prompt.tools:
            body["tools"] = _tools(prompt.tools)
        if prompt.tool_choice:
            body["tool_choice"] = prompt.tool_choice
        self.last_id = None
        headers = _openai.apply_options(body, options)
        return HttpCall("POST", self.endpoint, body, headers, stream=mode == "stream")

    def parse_event(self, event: str | None, data: str) -> EventInfo:
        """One named event (module docstring)."""
        if event == _TEXT_DELTA or (event is None and _TEXT_TYPE in data):
            text = _named.cut(data, '"delta":"')
            if text is not None:
                return _openai.plain(text) if text else _named.EMPTY
        if data == "[DONE]":  # a gateway's end marker after the API's own (LiteLLM's)
            return _named.DONE
        obj = _named.decode(data)
        kind = obj.get("type")
        if not isinstance(kind, str):
            raise ValueError("a Responses API event without a 'type'")
        if event is not None and event != kind and event != "error":
            raise ValueError(f"the event is named {event!r} but its type is {kind!r}")
        if kind in _QUIET:
            return _named.EMPTY
        if kind == _TEXT_DELTA:
            text = _named.string(obj, "delta")
            return _openai.plain(text) if text else _named.EMPTY
        if kind in _REASONING_DELTAS:
            text = _named.string(obj, "delta")
            return EventInfo(content=text, reasoning=True, answer="") if text else _named.EMPTY
        if kind == "response.function_call_arguments.delta":
            return self._call(obj, _named.string(obj, "delta"))
        if kind == "response.output_item.added":
            item = obj.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                return self._call(obj, _named.string(item, "name"))
            return _named.EMPTY
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            response = obj.get("response")
            if not isinstance(response, dict):
                raise ValueError(f"{kind} carries no response object")
            self._keep_id(response)
            return _final(response, obj)
        if kind == "error":
            return EventInfo(error=_error(obj.get("error") or obj))
        return _named.UNKNOWN

    @staticmethod
    def _call(obj: dict[str, Any], text: str) -> EventInfo:
        """A piece of a tool call (its name, or arguments) in the item at ``output_index``."""
        index = obj.get("output_index")
        if type(index) is not int:
            raise ValueError("a function call event without an integer output_index")
        return EventInfo(content=text, answer="", tool_calls=(index,))

    def _keep_id(self, response: dict[str, Any]) -> None:
        rid = response.get("id")
        self.last_id = rid if isinstance(rid, str) and rid else None

    def parse_body(self, body: bytes) -> EventInfo:
        """A response object (or an error object)."""
        obj = _openai.decode(body)
        err = obj.get("error")
        if err and obj.get("object") != "response":
            return EventInfo(error=_openai.error_text(err), done=True)
        if "output" not in obj:
            raise ValueError("response has no 'output'")
        self._keep_id(obj)
        content, shape = _output(obj.get("output"))
        return _final(obj, obj, content=content, **shape)


def _output(output: Any) -> tuple[str, dict[str, Any]]:
    """A response's ``output`` items: their text (reasoning, answer, then tool calls) and
    the ``EventInfo`` fields that say which is which."""
    if not isinstance(output, list):
        raise ValueError("response 'output' is not a list")
    parts = _named.Parts()
    for index, item in enumerate(output):
        if not isinstance(item, dict):
            raise ValueError("an output item is not an object")
        kind = item.get("type")
        if kind == "function_call":
            parts.call(index, _named.string(item, "name") + _named.string(item, "arguments"))
            continue
        pieces = item.get("content") or []
        if kind == "reasoning" and not pieces:
            pieces = item.get("summary") or []
        if not isinstance(pieces, list):
            raise ValueError("an output item's content is not a list")
        texts = parts.reasoning if kind == "reasoning" else parts.answer
        texts += [_named.string(piece, "text") for piece in pieces if isinstance(piece, dict)]
    return parts.content()
