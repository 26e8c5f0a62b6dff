"""Embeddings (``/v1/embeddings``) and rerank (``/v1/rerank``): requests with no stream.

No token comes back, so there is no TTFT, ITL or output: what a run measures is
latency (E2E: the whole response), requests and inputs per second, and the
prompt tokens the server counted (``usage``).  A request carries ``--batch-size``
texts the run draws (``Prompt.inputs``): the inputs to embed, or the documents to
rank against the prompt's own text (the query).  A record keeps how many
(``inputs``).

Bad answers are ``protocol`` with what was wrong: fewer vectors (or ranked
results) than asked for, a vector that is empty, an index out of range.
"""

from __future__ import annotations

from typing import Any

from llmload.loadtests.measure.adapters import _named, _openai
from llmload.loadtests.measure.adapters.base import EventInfo, HttpCall, Prompt, register
from llmload.loadtests.measure.record import Mode


def prompt_text(prompt: Prompt) -> str:
    """A prompt as one text: its plain prompt, else its last user message."""
    if prompt.prompt is not None:
        return prompt.prompt
    users = [m for m in prompt.messages or () if m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    return content if isinstance(content, str) else str(content or "")


def _inputs(prompt: Prompt) -> list[str]:
    return list(prompt.inputs) or [prompt_text(prompt)]


def _call(endpoint: str, body: dict[str, Any], mode: Mode, options: dict[str, Any]) -> HttpCall:
    if mode != "sync":
        raise ValueError(f"{endpoint} has no stream: run it with --modes sync")
    options = {k: v for k, v in options.items() if k in ("extra_body", "headers")}
    headers = _openai.apply_options(body, options)
    return HttpCall("POST", endpoint, body, headers, stream=False)


def _error(obj: dict[str, Any]) -> EventInfo | None:
    err = obj.get("error")
    if err:
        return EventInfo(error=_openai.error_text(err), done=True)
    if obj.get("object") == "error":
        return EventInfo(error=_openai.error_text(obj), done=True)
    if "detail" in obj and "data" not in obj and "results" not in obj:
        return EventInfo(error=_openai.error_text(obj["detail"]), done=True)
    return None


def _listed(obj: dict[str, Any], key: str, expected: int, per: str, sent: str) -> list[Any]:
    """``obj[key]``, a list of one item per text sent, or ``ValueError`` saying otherwise
    (``"2 vectors for 3 inputs"``)."""
    items = obj.get(key)
    if not isinstance(items, list):
        raise ValueError(f"response has no {key!r} list")
    if len(items) != expected:
        raise ValueError(f"{len(items)} {per} {expected} {sent}")
    return items


@register("openai-embeddings")
class OpenAIEmbeddings:
    """``/v1/embeddings``: ``input`` (the batch) in, one vector per input out."""

    name = "openai-embeddings"
    endpoint = "/v1/embeddings"
    streams = False
    pooled = True

    def __init__(self) -> None:
        self.expected = 0  # vectors the request asked for

    def build(self, prompt: Prompt, *, mode: Mode, model: str, options: dict[str, Any]) -> HttpCall:
        """One POST with every input of the prompt; vectors as floats."""
        inputs = _inputs(prompt)
        self.expected = len(inputs)
        body = {"model": model, "input": inputs, "encoding_format": "float"}
        return _call(self.endpoint, body, mode, options)

    def parse_event(self, event: str | None, data: str) -> EventInfo:
        raise ValueError("an embeddings response is not a stream")

    def parse_body(self, body: bytes) -> EventInfo:
        """``{"data": [{"embedding", "index"}...], "usage": {"prompt_tokens"}}``."""
        obj = _openai.decode(body)
        if (failed := _error(obj)) is not None:
            return failed
        data = _listed(obj, "data", self.expected, "vectors for", "inputs")
        seen = set()
        for position, item in enumerate(data):
            if not isinstance(item, dict):
                raise ValueError("a data item is not an object")
            index = item.get("index", position)
            vector = item.get("embedding")
            if type(index) is not int or not 0 <= index < self.expected or index in seen:
                raise ValueError(f"data[{position}] has index {index!r}")
            if not vector or not isinstance(vector, list | str):
                raise ValueError(f"the vector of input {index} is empty")
            seen.add(index)
        usage = obj.get("usage")
        return EventInfo(
            usage_prompt_tokens=_named.count(usage, "prompt_tokens"),
            server=_openai.server_timings(obj),
            done=True,
        )


@register("rerank")
class Rerank:
    """``/v1/rerank`` (vLLM, Jina, Cohere's v1 shape): a query and documents in, scores out."""

    name = "rerank"
    endpoint = "/v1/rerank"
    streams = False
    pooled = True

    def __init__(self) -> None:
        self.expected = 0  # documents sent

    def build(self, prompt: Prompt, *, mode: Mode, model: str, options: dict[str, Any]) -> HttpCall:
        """The prompt's text as the query, its inputs as the documents; every one ranked."""
        documents = list(prompt.inputs) or [prompt_text(prompt)]
        self.expected = len(documents)
        body = {"model": model, "query": prompt_text(prompt), "documents": documents}
        return _call(self.endpoint, body, mode, options)

    def parse_event(self, event: str | None, data: str) -> EventInfo:
        raise ValueError("a rerank response is not a stream")

    def parse_body(self, body: bytes) -> EventInfo:
        """``{"results": [{"index", "relevance_score"}...], "usage": {"total_tokens"}}``."""
        obj = _openai.decode(body)
        if (failed := _error(obj)) is not None:
            return failed
        results = _listed(obj, "results", self.expected, "results for", "documents")
        for position, item in enumerate(results):
            index = item.get("index") if isinstance(item, dict) else None
            score = item.get("relevance_score") if isinstance(item, dict) else None
            if type(index) is not int or not 0 <= index < self.expected:
                raise ValueError(f"results[{position}] has index {index!r}")
            if not isinstance(score, int | float):
                raise ValueError(f"results[{position}] has no relevance_score")
        usage = obj.get("usage")
        tokens = _named.count(usage, "total_tokens") or _named.count(usage, "prompt_tokens")
        return EventInfo(usage_prompt_tokens=tokens, server=_openai.server_timings(obj), done=True)
