"""Embeddings and rerank: requests with no stream, timed by their prompt tokens alone.

``POST /v1/embeddings`` (OpenAI's shape: ``input`` a string or a list of strings,
``encoding_format`` ``float`` or ``base64`` — float32 little-endian —, optional
``dimensions``) and ``POST /v1/rerank`` / ``/v2/rerank`` (``query``, ``documents``
as strings or ``{"text"}`` objects, ``top_n``; the shape vLLM and Jina/Cohere
clients use) are answered by an engine that can ``pool``: the synthetic one, which
spends ``--ttft-ms`` plus ``--prefill-ms-per-token`` for every prompt token of the
request (a batch: all its inputs; rerank: the query with each document), then
answers.  Vectors are drawn from each text (the same text, the same unit vector of
``--embedding-dim`` dimensions); a document's relevance is the share of the
query's words it holds, nudged by a draw from its text, in [0, 1].
"""

from __future__ import annotations

import base64
import hashlib
import math
import random
import re
import struct
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmload.target_server.errors import ApiError
from llmload.target_server.schemas import validation_error

EMBEDDINGS = "/v1/embeddings"
RERANK = "/v1/rerank"
RERANK_V2 = "/v2/rerank"
POOLING_ENDPOINTS = (EMBEDDINGS, RERANK, RERANK_V2)
#: the most inputs (or documents) one request may carry
MAX_INPUTS = 2048
_WORD = re.compile(r"\w+")


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    query: str
    documents: list[str | dict[str, Any]]
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = True


@dataclass(frozen=True, slots=True)
class PoolingJob:
    """A validated embeddings or rerank request: the texts whose tokens are computed."""

    endpoint: str
    model: str
    texts: tuple[str, ...]
    encoding: str = "float"
    dimensions: int | None = None
    query: str | None = None
    top_n: int | None = None
    return_documents: bool = True


def _check_model(model: str | None, served: str) -> None:
    if model is not None and model != served:
        msg = f"the model {model!r} does not exist"
        raise ApiError(404, msg, param="model", code="model_not_found")


def parse_pooling(endpoint: str, obj: dict[str, Any], served: str) -> PoolingJob:
    """Validate an embeddings or rerank body (raises ``ApiError``)."""
    try:
        if endpoint == EMBEDDINGS:
            emb = EmbeddingsRequest.model_validate(obj)
        else:
            rerank = RerankRequest.model_validate(obj)
    except ValidationError as exc:
        raise validation_error(exc) from None
    if endpoint == EMBEDDINGS:
        _check_model(emb.model, served)
        texts = (emb.input,) if isinstance(emb.input, str) else tuple(emb.input)
        if not texts:
            raise ApiError(400, "input must hold at least one string", param="input")
        if len(texts) > MAX_INPUTS:
            raise ApiError(400, f"at most {MAX_INPUTS} inputs per request", param="input")
        return PoolingJob(endpoint, served, texts, emb.encoding_format, emb.dimensions)
    _check_model(rerank.model, served)
    docs: list[str] = []
    for i, doc in enumerate(rerank.documents):
        text = doc.get("text") if isinstance(doc, dict) else doc
        if not isinstance(text, str):
            raise ApiError(400, f"documents.{i} has no text", param=f"documents.{i}")
        docs.append(text)
    if not docs:
        raise ApiError(400, "documents must hold at least one document", param="documents")
    if len(docs) > MAX_INPUTS:
        raise ApiError(400, f"at most {MAX_INPUTS} documents per request", param="documents")
    return PoolingJob(
        endpoint,
        served,
        tuple(docs),
        query=rerank.query,
        top_n=rerank.top_n,
        return_documents=rerank.return_documents,
    )


def pooled_texts(job: PoolingJob) -> list[str]:
    """What the model computes: each input, or the query beside each document."""
    if job.query is None:
        return list(job.texts)
    return [job.query + "\n" + doc for doc in job.texts]


def _rng(text: str) -> random.Random:
    return random.Random(hashlib.blake2b(text.encode(), digest_size=8).digest())


def vector(text: str, dim: int) -> list[float]:
    """The text's unit vector (the same text, the same vector)."""
    rng = _rng(text)
    raw = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [round(x / norm, 6) for x in raw]


def relevance(query: str, doc: str) -> float:
    """The share of the query's words in the document, nudged by a draw from its text."""
    words = {w.lower() for w in _WORD.findall(query)}
    seen = {w.lower() for w in _WORD.findall(doc)}
    overlap = len(words & seen) / len(words) if words else 0.0
    return round(0.9 * overlap + 0.1 * _rng(doc).random(), 6)


def answer(job: PoolingJob, tokens: int, dim: int, timings: dict[str, Any]) -> dict[str, Any]:
    """The response body (``x_llmload``: the server's own timings)."""
    if job.endpoint == EMBEDDINGS:
        size = job.dimensions or dim
        data = []
        for i, text in enumerate(job.texts):
            vec: Any = vector(text, size)
            if job.encoding == "base64":
                vec = base64.b64encode(struct.pack(f"<{size}f", *vec)).decode("ascii")
            data.append({"object": "embedding", "index": i, "embedding": vec})
        return {
            "object": "list",
            "model": job.model,
            "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "x_llmload": timings,
        }
    assert job.query is not None
    scored = sorted(
        ((relevance(job.query, doc), i, doc) for i, doc in enumerate(job.texts)),
        key=lambda t: (-t[0], t[1]),
    )
    results = []
    for score, i, doc in scored[: job.top_n or len(scored)]:
        result: dict[str, Any] = {"index": i, "relevance_score": score}
        if job.return_documents:
            result["document"] = {"text": doc}
        results.append(result)
    return {
        "id": "rerank-" + hashlib.blake2b(job.query.encode(), digest_size=8).hexdigest(),
        "model": job.model,
        "usage": {"total_tokens": tokens},
        "results": results,
        "x_llmload": timings,
    }
