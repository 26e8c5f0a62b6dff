"""Prompt tokens counted by the target (``/tokenize``), the byte bound, and context overflows.

The target's endpoints are answered by ``httpx.MockTransport`` in the shapes of vLLM,
SGLang and TGI (``loadtests.transport.tokenize`` names their sources); no sockets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmload.loadtests.measure.adapters.base import Prompt
from llmload.loadtests.measure.overflow import is_context_overflow
from llmload.loadtests.transport.discovery import tgi_context_length
from llmload.loadtests.transport.tokenize import (
    MAX_FAILURES,
    RemoteCounter,
    TokenizeRoute,
    probe_tokenize,
)
from llmload.loadtests.workload import BUILTIN, builtin_items
from llmload.loadtests.workload.fit import (
    PER_MESSAGE_TOKENS,
    PER_REQUEST_TOKENS,
    ContextFit,
    estimate_tokens,
)
from llmload.loadtests.workload.tokencount import load
from tests.fixtures.tokenizer import train_tokenizer

MESSAGES = [{"role": "user", "content": "hello there"}]


def server(routes: dict[str, Any], seen: list[tuple[str, dict]]) -> httpx.Client:
    """A client whose target answers ``routes[path](body)`` (404 for any other path)."""

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((request.url.path, body))
        answer = routes.get(request.url.path)
        if answer is None:
            return httpx.Response(404, json={"detail": "Not Found"})
        status, payload = answer(body)
        return httpx.Response(status, json=payload)

    return httpx.Client(base_url="http://target", transport=httpx.MockTransport(handle))


def vllm(body: dict) -> tuple[int, Any]:
    if "messages" in body:
        n = 10 * len(body["messages"])  # "template applied"
    elif "prompt" in body:
        n = len(body["prompt"].split())
    else:
        return 400, {"object": "error", "message": "bad request"}
    return 200, {"count": n, "max_model_len": 2048, "tokens": list(range(n))}


def test_each_servers_endpoint_is_found_and_read() -> None:
    seen: list[tuple[str, dict]] = []
    # vLLM: /tokenize with messages and the generation prompt
    route = probe_tokenize(server({"/tokenize": vllm}, seen), "m", chat=True)
    assert route == TokenizeRoute("/tokenize", "messages") and route.templated
    assert seen[0][1] == {
        "model": "m",
        "messages": [{"role": "user", "content": "hello"}],
        "add_generation_prompt": True,
    }

    # SGLang (older: prompt only, at /v1/tokenize)
    def sglang(body: dict) -> tuple[int, Any]:
        if "messages" in body:
            return 400, {"object": "error", "message": "prompt required"}
        return 200, {"tokens": [1, 2], "count": 2, "max_model_len": 4096}

    route = probe_tokenize(server({"/v1/tokenize": sglang}, []), "m", chat=True)
    assert route == TokenizeRoute("/v1/tokenize", "prompt") and not route.templated

    # TGI: /chat_tokenize answers the chat; /tokenize a plain text's token list
    def tgi_chat(body: dict) -> tuple[int, Any]:
        return 200, {"tokenize_response": [{"id": 1}, {"id": 2}, {"id": 3}], "templated_text": "x"}

    def tgi_tokenize(body: dict) -> tuple[int, Any]:
        if "inputs" not in body:
            return 422, {"error": "missing field `inputs`", "error_type": "validation"}
        return 200, [{"id": i, "text": "t", "start": 0, "stop": 1} for i in range(4)]

    routes = {"/chat_tokenize": tgi_chat, "/tokenize": tgi_tokenize}
    assert probe_tokenize(server(routes, []), "m", chat=True) == TokenizeRoute(
        "/chat_tokenize", "tgi_chat"
    )
    plain = probe_tokenize(server(routes, []), "m", chat=False)
    assert plain == TokenizeRoute("/tokenize", "tgi_inputs")
    # a server with none of them (the bundled one): None, after one try of each
    seen.clear()
    assert probe_tokenize(server({}, seen), "m", chat=True) is None and len(seen) == 5
    # TGI tells its context length in /info
    assert tgi_context_length({"max_total_tokens": 4096, "max_input_tokens": 4095}) == 4096
    assert tgi_context_length({"model_id": "x"}) is None and tgi_context_length([]) is None


def test_the_counter_asks_once_per_prompt_and_gives_up_after_failures() -> None:
    seen: list[tuple[str, dict]] = []
    client = server({"/tokenize": vllm}, seen)
    counter = RemoteCounter(
        None, TokenizeRoute("/tokenize", "messages"), "m", client=lambda: client
    )
    p = Prompt("s", "p", messages=MESSAGES * 3)
    assert counter(p) == 30 and counter(p) == 30 and len(seen) == 1
    assert counter(Prompt("s", "q", prompt="hi")) == 10 and len(seen) == 2
    broken = server({"/tokenize": lambda body: (500, {"error": "down"})}, seen)
    counter = RemoteCounter(
        None, TokenizeRoute("/tokenize", "messages"), "m", client=lambda: broken
    )
    for i in range(MAX_FAILURES):
        assert counter(Prompt("s", str(i), prompt=str(i))) is None
    assert not counter.enabled and counter(p) is None  # no more asking


def test_the_fit_prefers_the_targets_count_and_falls_back() -> None:
    class Target:
        templated = True

        def __init__(self, answer: int | None) -> None:
            self.answer = answer

        def __call__(self, prompt: Prompt) -> int | None:
            return self.answer

    p = Prompt("s", "p", messages=MESSAGES, max_tokens=64)
    fit = ContextFit(100, remote=Target(90))
    assert fit.prompt_tokens(p) == 90 and fit.fit(p) is None  # 10 left: skipped
    assert fit.describe()["prompt_tokens"] == "target"
    fallback = ContextFit(100, remote=Target(None))
    assert (
        fallback.prompt_tokens(p)
        == estimate_tokens("hello there") + PER_MESSAGE_TOKENS + PER_REQUEST_TOKENS
    )
    untemplated = Target(7)
    untemplated.templated = False  # message texts only: the template allowance is added
    assert (
        ContextFit(100, remote=untemplated).prompt_tokens(p)
        == 7 + PER_MESSAGE_TOKENS + PER_REQUEST_TOKENS
    )


def test_the_bound_holds_for_a_small_vocabulary(tmp_path: Path) -> None:
    """A byte-level BPE of 300 entries (hardly a merge beyond the bytes) on every built-in
    prompt: never more tokens than the bound, which is its UTF-8 bytes."""
    count = load(train_tokenizer(tmp_path / "tok", vocab_size=300))
    for name in BUILTIN:
        for item in builtin_items(name):
            for m in item.first_messages():
                text = str(m["content"])
                assert estimate_tokens(text) >= count(text), (name, item.item_id)
                assert estimate_tokens(text) == len(text.encode())


#: servers' context-length refusals, as their error bodies wrap them
OVERFLOWS = [
    # vLLM: older (an unwrapped error object), newer, newest
    {
        "object": "error",
        "message": "This model's maximum context length is 2048 tokens. However, you requested "
        "2100 tokens (2000 in the messages, 100 in the completion). Please reduce the length "
        "of the messages or completion.",
        "code": 400,
    },
    {
        "error": {
            "message": "This model's maximum context length is 2048 tokens. However, your "
            "prompt contains at least 2049 input tokens.",
            "code": 400,
        }
    },
    {
        "error": {
            "message": "'max_tokens' or 'max_completion_tokens' is too large: 256. This "
            "model's maximum context length is 2048 tokens and your request has 1900 input "
            "tokens (256 > 2048 - 1900).",
        }
    },
    {
        "error": {
            "message": "The decoder prompt (length 2049) is longer than the maximum model "
            "length of 2048. Make sure that `max_model_len` is no smaller than the number of "
            "text tokens."
        }
    },
    # SGLang
    {
        "object": "error",
        "message": "Requested token count exceeds the model's maximum context length of 2048 "
        "tokens. You requested a total of 2300 tokens: 2100 tokens from the input messages "
        "and 200 tokens for the completion.",
    },
    {
        "object": "error",
        "message": "The input (2049 tokens) is longer than the model's context length "
        "(2048 tokens).",
    },
    # TGI (422)
    {
        "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. "
        "Given: 4000 `inputs` tokens and 200 `max_new_tokens`",
        "error_type": "validation",
    },
    # OpenAI and the bundled server: the code
    {
        "error": {
            "message": "the prompt has 40000 tokens; the context holds 32768",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    },
]


@pytest.mark.parametrize("body", OVERFLOWS)
def test_context_overflow_bodies_are_recognised(body: dict) -> None:
    assert is_context_overflow(json.dumps(body))


@pytest.mark.parametrize(
    "body",
    [
        '{"error":{"message":"max_tokens must be at least 1, got 0","code":400}}',
        '{"error":{"message":"the model \'x\' does not exist","code":"model_not_found"}}',
        "Bad Request",
    ],
)
def test_other_client_errors_are_not_overflows(body: str) -> None:
    assert not is_context_overflow(body)
