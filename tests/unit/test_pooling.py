"""Embeddings and rerank: the bundled server's answers and the adapters that read them."""

from __future__ import annotations

import base64
import json
import math
import struct

import pytest

from llmload.loadtests.measure.adapters import get_adapter
from llmload.loadtests.measure.adapters.base import Prompt, pooled, streams
from llmload.target_server.errors import ApiError
from llmload.target_server.pooling import (
    EMBEDDINGS,
    RERANK,
    answer,
    parse_pooling,
    pooled_texts,
    relevance,
    vector,
)

TIMINGS = {"queue_s": 0.0, "ttft_s": None, "e2e_s": 0.05}


def body_of(endpoint: str, obj: dict, dim: int = 8) -> bytes:
    job = parse_pooling(endpoint, obj, "m")
    return json.dumps(answer(job, 10, dim, TIMINGS)).encode()


def test_vectors_are_unit_and_the_same_text_gives_the_same_vector() -> None:
    a, b = vector("hello", 16), vector("hello", 16)
    assert a == b and vector("other", 16) != a
    assert math.isclose(math.sqrt(sum(x * x for x in a)), 1.0, abs_tol=1e-5)


def test_embeddings_answer_floats_or_base64_and_dimensions() -> None:
    obj = json.loads(body_of(EMBEDDINGS, {"input": ["a", "b", "c"], "dimensions": 4}))
    assert [d["index"] for d in obj["data"]] == [0, 1, 2]
    assert all(len(d["embedding"]) == 4 for d in obj["data"])
    assert obj["usage"] == {"prompt_tokens": 10, "total_tokens": 10}
    b64 = json.loads(body_of(EMBEDDINGS, {"input": "a", "encoding_format": "base64"}))
    floats = struct.unpack("<8f", base64.b64decode(b64["data"][0]["embedding"]))
    assert floats == pytest.approx(vector("a", 8), abs=1e-6)


def test_rerank_orders_by_relevance_and_keeps_top_n() -> None:
    docs = ["the stock market fell", "a cat is an animal", {"text": "what is this cat"}]
    obj = json.loads(body_of(RERANK, {"query": "what is a cat", "documents": docs, "top_n": 2}))
    scores = [r["relevance_score"] for r in obj["results"]]
    assert len(scores) == 2 and scores == sorted(scores, reverse=True)
    assert obj["results"][0]["index"] in (1, 2) and 0 <= min(scores) <= max(scores) <= 1
    assert relevance("cat", "cat") > relevance("cat", "dog")
    job = parse_pooling(RERANK, {"query": "q", "documents": ["d1", "d2"]}, "m")
    assert pooled_texts(job) == ["q\nd1", "q\nd2"]  # the model reads the query with each


@pytest.mark.parametrize(
    ("endpoint", "obj", "status"),
    [
        (EMBEDDINGS, {"input": []}, 400),
        (EMBEDDINGS, {}, 400),
        (EMBEDDINGS, {"input": "x", "model": "other"}, 404),
        (EMBEDDINGS, {"input": "x", "encoding_format": "int8"}, 400),
        (RERANK, {"query": "q", "documents": []}, 400),
        (RERANK, {"query": "q", "documents": [{"no": "text"}]}, 400),
    ],
)
def test_bad_bodies_are_clear_errors(endpoint: str, obj: dict, status: int) -> None:
    with pytest.raises(ApiError) as err:
        parse_pooling(endpoint, obj, "m")
    assert err.value.status == status


def test_the_adapters_send_the_batch_and_have_no_stream() -> None:
    prompt = Prompt("s", "p", prompt="the query", inputs=("one", "two", "three"))
    emb, rr = get_adapter("openai-embeddings"), get_adapter("rerank")
    assert emb.build(prompt, mode="sync", model="m", options={}).json == {
        "model": "m",
        "input": ["one", "two", "three"],
        "encoding_format": "float",
    }
    call = rr.build(prompt, mode="sync", model="m", options={"temperature": 0.5})
    assert call.json == {"model": "m", "query": "the query", "documents": ["one", "two", "three"]}
    with pytest.raises(ValueError, match="no stream"):
        emb.build(prompt, mode="stream", model="m", options={})
    assert not streams("rerank") and pooled("openai-embeddings") and streams("openai-chat")


def test_an_answer_that_does_not_match_the_request_is_named() -> None:
    emb = get_adapter("openai-embeddings")
    emb.build(
        Prompt("s", "p", prompt="q", inputs=("a", "b", "c")), mode="sync", model="m", options={}
    )
    ok = emb.parse_body(body_of(EMBEDDINGS, {"input": ["a", "b", "c"]}))
    assert ok.done and ok.error is None and ok.usage_prompt_tokens == 10
    with pytest.raises(ValueError, match="2 vectors for 3 inputs"):
        emb.parse_body(body_of(EMBEDDINGS, {"input": ["a", "b"]}))
    empty = {"data": [{"index": i, "embedding": [] if i == 1 else [0.1]} for i in range(3)]}
    with pytest.raises(ValueError, match="vector of input 1 is empty"):
        emb.parse_body(json.dumps(empty).encode())
    twice = {"data": [{"index": 0, "embedding": [0.1]} for _ in range(3)]}
    with pytest.raises(ValueError, match="index 0"):
        emb.parse_body(json.dumps(twice).encode())
    err = emb.parse_body(ApiError(400, "input too long").payload())
    assert err.error is not None and "input too long" in err.error
    rr = get_adapter("rerank")
    rr.build(Prompt("s", "p", prompt="q", inputs=("a", "b")), mode="sync", model="m", options={})
    short = body_of(RERANK, {"query": "q", "documents": ["a", "b"], "top_n": 1})
    with pytest.raises(ValueError, match="1 results for 2 documents"):
        rr.parse_body(short)
    full = rr.parse_body(body_of(RERANK, {"query": "q", "documents": ["a", "b"]}))
    assert full.done and full.usage_prompt_tokens == 10
