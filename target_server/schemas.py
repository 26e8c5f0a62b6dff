"""OpenAI request schemas and their translation into a ``GenerationRequest``."""

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

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"

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


def _tools(req: ChatRequest) -> tuple[tuple[str, ...], bool]:
    """The function names a chat request offers, and whether ``tool_choice`` demands a call.

    ``tool_choice`` "none" offers nothing; a named function must be one of ``tools``
    (400 otherwise, as OpenAI answers) and is the one called.
    """
    names = tuple(t.function.name for t in req.tools or ())
    choice = req.tool_choice
    if choice is None or choice == "auto":
        return names, False
    if choice == "none":
        return (), False
    if not names:
        raise ApiError(400, "tool_choice is set but no tools are given", param="tool_choice")
    if choice == "required":
        return names, True
    assert isinstance(choice, NamedToolChoice)
    if choice.function.name not in names:
        msg = f"tool_choice names {_short(choice.function.name)}, which is not in tools"
        raise ApiError(400, msg, param="tool_choice")
    return (choice.function.name,), True


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


def parse_request(
    endpoint: str, obj: dict[str, Any], request_id: str, served_model: str, max_output: int
) -> ParsedRequest:
    """Validate one chat/completions body into a ``ParsedRequest`` (raises ``ApiError``)."""
    schema: type[_Common] = ChatRequest if endpoint == CHAT else CompletionRequest
    try:
        req = schema.model_validate(obj)
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
    max_tokens, param = req.max_tokens, "max_tokens"
    defaulted = max_tokens is None and getattr(req, "max_completion_tokens", None) is None
    if isinstance(req, ChatRequest) and req.max_completion_tokens is not None:
        max_tokens, param = req.max_completion_tokens, "max_completion_tokens"
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
    stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
    extra = {k: v for k in EXTRA_GENERATION_FIELDS if (v := getattr(req, k)) is not None}
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    tools: tuple[str, ...] = ()
    tool_required = False
    if isinstance(req, ChatRequest):
        messages = [{"role": m.role, "content": _content_text(m.content)} for m in req.messages]
        tools, tool_required = _tools(req)
    else:
        assert isinstance(req, CompletionRequest)
        if isinstance(req.prompt, list):
            if len(req.prompt) != 1:
                raise ApiError(400, "exactly one prompt per request is supported", param="prompt")
            prompt = req.prompt[0]
        else:
            prompt = req.prompt
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
    )
    opts = req.stream_options
    return ParsedRequest(
        endpoint=endpoint,
        stream=bool(req.stream),
        include_usage=bool(req.stream and opts and opts.include_usage),
        model=served_model,
        generation=generation,
        max_tokens_defaulted=defaulted,
    )
