"""Request schemas and their translation into a ``GenerationRequest``.

Four generation APIs, one ``GenerationRequest``: OpenAI chat completions and
completions, the OpenAI Responses API (``input`` items, ``instructions``,
``max_output_tokens``, flattened function ``tools``, ``previous_response_id``)
and Anthropic's Messages API (``system`` apart from ``messages``, content
blocks, ``max_tokens`` required, ``stop_sequences``, ``tools`` with
``input_schema``).  What a body may hold beyond its API (``ignore_eos``,
``min_tokens``, ``seed``: vLLM's extensions) is read the same way for all.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmload.target_server.engine import GenerationRequest
from llmload.target_server.errors import ApiError
from llmload.target_server.images import Image, from_part

#: the content-part types that carry an image (chat, Responses, Anthropic)
IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
#: every generation endpoint, in the order the docs list them
GENERATION_ENDPOINTS = (CHAT, COMPLETIONS, RESPONSES, MESSAGES)

#: request fields passed through to engines as ``GenerationRequest.extra``
EXTRA_GENERATION_FIELDS = (
    "top_k",
    "min_p",
    "typical_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "no_repeat_ngram_size",
)
#: ``seed`` must fit a signed 64-bit integer, as in vLLM (torch generators take no more)
SEED_RANGE = (-(2**63), 2**63 - 1)
#: the longest integer literal a body may hold (Python's own limit for ``int(str)``)
MAX_INT_DIGITS = 4300
#: a ``\uD800``-``\uDFFF`` escape in the body: only then can a decoded string hold a lone
#: surrogate (strict UTF-8 cannot encode one; a valid escaped pair decodes to one code point)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    n: int | None = 1
    ignore_eos: bool = False
    min_tokens: int = Field(default=0, ge=0)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    # passed to engines (EXTRA_GENERATION_FIELDS): typed here, ranges checked by the engine
    top_k: int | None = None
    min_p: float | None = None
    typical_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    no_repeat_ngram_size: int | None = None


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)


class ToolSpec(BaseModel):
    """One entry of ``tools``: a function the model may call (its schema is not checked)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    function: FunctionSpec


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    function: FunctionSpec


class ChatRequest(_Common):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = None
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None


class CompletionRequest(_Common):
    prompt: str | list[str]


class ResponsesTool(BaseModel):
    """A Responses API tool: ``{"type": "function", "name", "parameters"}`` (flattened)."""

    model_config = ConfigDict(extra="allow")

    type: str = "function"
    name: str | None = None


class ResponsesRequest(_Common):
    """``POST /v1/responses``: ``input`` (a string or items), ``max_output_tokens``."""

    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: int | None = None
    tools: list[ResponsesTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    previous_response_id: str | None = None
    store: bool = True


class AnthropicTool(BaseModel):
    """A Messages API tool: ``{"name", "description", "input_schema"}``."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)


class AnthropicMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class MessagesRequest(_Common):
    """``POST /v1/messages`` (Anthropic): ``max_tokens`` is required, ``system`` apart."""

    max_tokens: int  # type: ignore[assignment]  # required here, optional in OpenAI's APIs
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    stop_sequences: list[str] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """What the HTTP layer keeps of a request body."""

    endpoint: str
    stream: bool
    include_usage: bool
    model: str
    generation: GenerationRequest
    # max_tokens was not in the body: the server may shorten it to fit the context
    max_tokens_defaulted: bool = False
    # Responses API: the response this one continues, and whether to keep this one
    previous_response_id: str | None = None
    store: bool = False


def _tool_choice(
    names: tuple[str, ...], choice: str | None, named: str | None
) -> tuple[tuple[str, ...], bool]:
    """The function names a request offers, and whether its tool choice demands a call.

    ``choice`` is "auto" (or None), "none" (offers nothing), "required" or "named"
    (``named`` is the function, which must be one of ``names``: 400 otherwise, as
    OpenAI and Anthropic answer).
    """
    if choice is None or choice == "auto":
        return names, False
    if choice == "none":
        return (), False
    if not names:
        raise ApiError(400, "tool_choice is set but no tools are given", param="tool_choice")
    if choice == "required":
        return names, True
    if named not in names:
        msg = f"tool_choice names {_short(str(named))}, which is not in tools"
        raise ApiError(400, msg, param="tool_choice")
    return (str(named),), True


def _chat_tools(req: ChatRequest) -> tuple[tuple[str, ...], bool]:
    names = tuple(t.function.name for t in req.tools or ())
    choice = req.tool_choice
    if isinstance(choice, NamedToolChoice):
        return _tool_choice(names, "named", choice.function.name)
    return _tool_choice(names, choice, None)


def _responses_tools(req: ResponsesRequest) -> tuple[tuple[str, ...], bool]:
    names = tuple(t.name for t in req.tools or () if t.type == "function" and t.name)
    choice = req.tool_choice
    if isinstance(choice, dict):  # {"type": "function", "name": ...}
        return _tool_choice(names, "named", choice.get("name"))
    return _tool_choice(names, choice, None)


#: Anthropic ``tool_choice.type`` -> the OpenAI word for it
_ANTHROPIC_CHOICE = {"auto": "auto", "any": "required", "none": "none", "tool": "named"}


def _messages_tools(req: MessagesRequest) -> tuple[tuple[str, ...], bool]:
    names = tuple(t.name for t in req.tools or ())
    choice = req.tool_choice or {}
    kind = _ANTHROPIC_CHOICE.get(str(choice.get("type", "auto")))
    if kind is None:
        msg = f"tool_choice.type must be one of {sorted(_ANTHROPIC_CHOICE)}"
        raise ApiError(400, msg, param="tool_choice.type")
    return _tool_choice(names, kind, choice.get("name"))


def _block_text(content: Any, param: str) -> str:
    """The text of a string or a list of content blocks (``text``, ``input_text``,
    ``output_text``; a ``tool_result``'s own content; others carry no text)."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise ApiError(400, f"invalid request ({param}): content must be a string or a list")
    out: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            raise ApiError(400, f"invalid request ({param}): a content block is not an object")
        text = block.get("text")
        if block.get("type") == "tool_result":
            text = _block_text(block.get("content"), param)
        if text is not None and not isinstance(text, str):
            raise ApiError(400, f"invalid request ({param}): a block's text is not a string")
        out.append(text or "")
    return "".join(out)


def _responses_messages(req: ResponsesRequest) -> list[dict[str, Any]]:
    """``input`` as chat messages: message items by role, a function call's output as a
    ``tool`` message, a function call as the assistant's (its arguments); reasoning
    items carry nothing the prompt needs."""
    messages: list[dict[str, Any]] = []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
    if isinstance(req.input, str):
        messages.append({"role": "user", "content": req.input})
        return messages
    for i, item in enumerate(req.input):
        kind = item.get("type", "message")
        param = f"input.{i}"
        if kind == "message":
            role = item.get("role")
            if role not in ("system", "developer", "user", "assistant"):
                raise ApiError(400, f"invalid request ({param}.role): unknown role", param=param)
            messages.append({"role": role, "content": _block_text(item.get("content"), param)})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "content": _block_text(item.get("output"), param)})
        elif kind == "function_call":
            messages.append({"role": "assistant", "content": str(item.get("arguments") or "")})
        elif kind != "reasoning":
            msg = f"invalid request ({param}.type): input items of type {_short(str(kind))} "
            raise ApiError(400, msg + "are not supported", param=param)
    if len(messages) == (1 if req.instructions else 0) and not req.input:
        raise ApiError(400, "invalid request (input): at least one input item", param="input")
    return messages


def _anthropic_messages(req: MessagesRequest) -> list[dict[str, Any]]:
    """``system`` and ``messages`` as chat messages (a ``tool_result`` block's text is the
    user's; a ``tool_use`` block carries no text)."""
    messages: list[dict[str, Any]] = []
    system = _block_text(req.system, "system")
    if system:
        messages.append({"role": "system", "content": system})
    for i, m in enumerate(req.messages):
        messages.append({"role": m.role, "content": _block_text(m.content, f"messages.{i}")})
    return messages


def _content_text(content: str | list[TextPart] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(p.text or "" for p in content if p.type == "text")


def _loc_param(loc: tuple[Any, ...]) -> str:
    return ".".join(str(x) for x in loc if not str(x).startswith(("str", "list", "function")))


def validation_error(exc: ValidationError | Any) -> ApiError:
    """A pydantic/FastAPI validation error as a 400 OpenAI error."""
    errors = exc.errors() if hasattr(exc, "errors") else []
    first = errors[0] if errors else {"loc": (), "msg": str(exc)}
    loc = tuple(x for x in first.get("loc", ()) if x != "body")
    param = _loc_param(loc) or None
    where = f" ({param})" if param else ""
    return ApiError(400, f"invalid request{where}: {first.get('msg')}", param=param)


class BodyRefused(ValueError):
    """A body that is JSON to a lenient parser but not a request this server accepts."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        keys = [k for k, _ in pairs]
        dup = next(k for i, k in enumerate(keys) if k in keys[:i])
        raise BodyRefused(f"duplicate key {_short(dup)} in an object")
    return obj


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BodyRefused(f"the number {_short(text)} is out of range")
    return value


def _int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        digits = len(text.lstrip("-"))
        raise BodyRefused(f"an integer of {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _constant(name: str) -> Any:
    raise BodyRefused(f"{name} is not a JSON number")


def _strings(obj: Any) -> Iterator[str]:
    """Every key and string value in a decoded body (iterative: depth costs no stack)."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            yield from item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _short(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def decode_json(body: bytes) -> dict[str, Any]:
    """Parse a request body strictly; anything it cannot read becomes a 400 ``invalid_json``.

    Beyond malformed JSON and non-objects it refuses what Python's decoder lets
    through or raises on instead of reporting: nesting deeper than the
    interpreter's recursion limit, integer literals over ``MAX_INT_DIGITS``
    digits, ``NaN``/``Infinity`` and numbers that overflow to infinity,
    duplicate keys (which value wins differs between parsers) and strings with
    a lone UTF-16 surrogate (not Unicode text: tokenizers and encoders raise).
    The body must be UTF-8 (RFC 8259; a leading BOM is ignored).
    """
    try:
        text = body.decode("utf-8-sig")  # strict: no UTF-16/32 guessing, no encoded surrogates
    except UnicodeDecodeError as exc:
        msg = f"the body is not UTF-8 ({exc.reason} at byte {exc.start})"
        raise ApiError(400, f"malformed JSON body: {msg}", code="invalid_json") from None
    try:
        obj = json.loads(
            text,
            object_pairs_hook=_object,
            parse_float=_float,
            parse_int=_int,
            parse_constant=_constant,
        )
    except RecursionError:
        raise ApiError(400, "malformed JSON body: nested too deeply", code="invalid_json") from None
    except ValueError as exc:  # JSONDecodeError, BodyRefused
        raise ApiError(400, f"malformed JSON body: {exc}", code="invalid_json") from None
    if not isinstance(obj, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    if _SURROGATE_ESCAPE.search(text):
        for text in _strings(obj):
            if match := _SURROGATE.search(text):
                msg = f"a lone surrogate U+{ord(match.group()):04X} in a string (not Unicode text)"
                raise ApiError(400, f"malformed JSON body: {msg}", code="invalid_json")
    return obj


#: endpoint -> its request schema
_SCHEMAS: dict[str, type[_Common]] = {
    CHAT: ChatRequest,
    COMPLETIONS: CompletionRequest,
    RESPONSES: ResponsesRequest,
    MESSAGES: MessagesRequest,
}


def _max_tokens(req: _Common) -> tuple[int | None, str]:
    """The output limit the body asks for (None: not given) and the field that gave it."""
    if isinstance(req, ChatRequest) and req.max_completion_tokens is not None:
        return req.max_completion_tokens, "max_completion_tokens"
    if isinstance(req, ResponsesRequest):
        return req.max_output_tokens, "max_output_tokens"
    return req.max_tokens, "max_tokens"


def _images(contents: list[Any]) -> tuple[Image, ...]:
    """The images in these message contents (strings, or lists of parts of any API)."""
    out: list[Image] = []
    for content in contents:
        if not isinstance(content, list):
            continue
        for part in content:
            if isinstance(part, BaseModel):
                part = part.model_dump()
            if isinstance(part, dict) and part.get("type") in IMAGE_PARTS:
                try:
                    image = from_part(part)
                except ValueError as exc:
                    raise ApiError(400, f"invalid request: {exc}", param="messages") from None
                if image is not None:
                    out.append(image)
    return tuple(out)


def _contents(req: _Common) -> list[Any]:
    """Every message content of a body (where its images are)."""
    if isinstance(req, ChatRequest):
        return [m.content for m in req.messages]
    if isinstance(req, MessagesRequest):
        return [m.content for m in req.messages]
    if isinstance(req, ResponsesRequest) and isinstance(req.input, list):
        return [item.get("content") for item in req.input]
    return []


def _inputs(
    req: _Common,
) -> tuple[list[dict[str, Any]] | None, str | None, tuple[str, ...], bool, tuple[str, ...]]:
    """(messages, prompt, tools, tool_required, stop) of a validated body."""
    stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
    if isinstance(req, ChatRequest):
        messages = [{"role": m.role, "content": _content_text(m.content)} for m in req.messages]
        return messages, None, *_chat_tools(req), stop
    if isinstance(req, ResponsesRequest):
        return _responses_messages(req), None, *_responses_tools(req), stop
    if isinstance(req, MessagesRequest):
        stop = tuple(req.stop_sequences or ()) or stop
        return _anthropic_messages(req), None, *_messages_tools(req), stop
    assert isinstance(req, CompletionRequest)
    if isinstance(req.prompt, list):
        if len(req.prompt) != 1:
            raise ApiError(400, "exactly one prompt per request is supported", param="prompt")
        return None, req.prompt[0], (), False, stop
    return None, req.prompt, (), False, stop


def parse_request(
    endpoint: str, obj: dict[str, Any], request_id: str, served_model: str, max_output: int
) -> ParsedRequest:
    """Validate one generation body (any of ``GENERATION_ENDPOINTS``) into a
    ``ParsedRequest`` (raises ``ApiError``)."""
    try:
        req = _SCHEMAS[endpoint].model_validate(obj)
    except ValidationError as exc:
        raise validation_error(exc) from None
    if req.model is not None and req.model != served_model:
        raise ApiError(
            404,
            f"the model {_short(req.model)} does not exist",
            param="model",
            code="model_not_found",
        )
    if req.n not in (None, 1):
        raise ApiError(400, "only n=1 is supported", param="n")
    max_tokens, param = _max_tokens(req)
    defaulted = max_tokens is None
    if max_tokens is None:
        max_tokens = min(256, max_output)
    if max_tokens <= 0:
        raise ApiError(400, f"{param} must be at least 1, got {max_tokens}", param=param)
    if max_tokens > max_output:
        raise ApiError(
            400, f"{param}={max_tokens} is above this server's limit {max_output}", param=param
        )
    if req.min_tokens > max_tokens:
        raise ApiError(400, "min_tokens must not exceed max_tokens", param="min_tokens")
    extra = {k: v for k in EXTRA_GENERATION_FIELDS if (v := getattr(req, k)) is not None}
    messages, prompt, tools, tool_required, stop = _inputs(req)
    images = _images(_contents(req))
    generation = GenerationRequest(
        request_id=request_id,
        messages=messages,
        prompt=prompt,
        max_tokens=max_tokens,
        min_tokens=req.min_tokens,
        ignore_eos=req.ignore_eos,
        temperature=req.temperature,
        top_p=req.top_p,
        seed=req.seed,
        stop=stop,
        extra=extra,
        tools=tools,
        tool_required=tool_required,
        images=images,
    )
    opts = req.stream_options
    # the Responses and Messages APIs always report usage (a stream: in its last events)
    usage = endpoint in (RESPONSES, MESSAGES) or bool(req.stream and opts and opts.include_usage)
    responses = req if isinstance(req, ResponsesRequest) else None
    return ParsedRequest(
        endpoint=endpoint,
        stream=bool(req.stream),
        include_usage=usage,
        model=served_model,
        generation=generation,
        max_tokens_defaulted=defaulted,
        previous_response_id=responses.previous_response_id if responses else None,
        store=responses.store if responses else False,
    )
