"""Prompt tokens counted by the target itself: its ``/tokenize`` endpoint, when it has one.

vLLM, SGLang and TGI can count a request's prompt tokens with the served model's own
tokenizer (and chat template), which no client-side estimate can match for every
vocabulary.  ``probe_tokenize`` finds, once at start-up, which of their endpoints the
target answers (``ROUTES``, in order):

* vLLM: ``POST /tokenize`` ``{"model", "messages", "add_generation_prompt": true}``
  (chat template applied) or ``{"model", "prompt"}`` -> ``{"count", "max_model_len",
  "tokens"}``;
* SGLang: ``POST /v1/tokenize``, the same bodies (``messages`` in newer releases,
  ``prompt`` in all) -> ``{"tokens", "count", "max_model_len"}``;
* TGI: ``POST /chat_tokenize`` (a chat request; template applied) ->
  ``{"tokenize_response": [tokens], "templated_text"}``, and ``POST /tokenize``
  ``{"inputs"}`` -> ``[tokens]``.

``RemoteCounter(target, route, model)`` then counts each distinct prompt once (a
``loadtests.workload.fit.PromptCounter``; users asking about the same prompt at once
wait for one answer); a prompt the target does not answer for is counted on the
client instead, and after ``MAX_FAILURES`` failures in a row it stops asking.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from llmload.loadtests.measure.adapters.base import Prompt
from llmload.loadtests.transport.target import Target

log = logging.getLogger("llmload.loadtests")

#: failures in a row after which the target is no longer asked
MAX_FAILURES = 3
#: seconds a user waits for another's answer about the same prompt
WAIT_S = 15.0
CACHE_MAX = 8192
_PROBE = [{"role": "user", "content": "hello"}]


@dataclass(frozen=True, slots=True)
class TokenizeRoute:
    """One way a target counts tokens: where to POST, in which form, what comes back."""

    path: str
    #: "messages" / "prompt": vLLM and SGLang's bodies; "tgi_chat" / "tgi_inputs": TGI's
    form: str

    @property
    def templated(self) -> bool:
        """Whether the count includes the chat template (a message list was sent)."""
        return self.form in ("messages", "tgi_chat")

    def body(self, model: str, prompt: Prompt | None = None) -> dict[str, Any]:
        """The request body for ``prompt`` (the probe's one message when None)."""
        messages = _messages(prompt) if prompt is not None else _PROBE
        text = "\n".join(str(m.get("content") or "") for m in messages)
        if self.form == "messages":
            return {"model": model, "messages": messages, "add_generation_prompt": True}
        if self.form == "prompt":
            return {"model": model, "prompt": text}
        if self.form == "tgi_chat":
            return {"model": model, "messages": messages}
        return {"inputs": text}

    def count(self, answer: Any) -> int:
        """The token count in the target's answer (``ValueError`` when there is none)."""
        if self.form in ("messages", "prompt") and isinstance(answer, dict):
            n = answer.get("count")
            if type(n) is int and n >= 0:
                return n
        if self.form == "tgi_chat" and isinstance(answer, dict):
            tokens = answer.get("tokenize_response")
            if isinstance(tokens, list):
                return len(tokens)
        if self.form == "tgi_inputs" and isinstance(answer, list):
            return len(answer)
        raise ValueError(f"no token count in the answer of {self.path}")


#: the endpoints tried, in order, for a chat protocol (``CHAT_ROUTES``) and a plain one
CHAT_ROUTES = (
    TokenizeRoute("/tokenize", "messages"),
    TokenizeRoute("/v1/tokenize", "messages"),
    TokenizeRoute("/chat_tokenize", "tgi_chat"),
    TokenizeRoute("/v1/tokenize", "prompt"),
    TokenizeRoute("/tokenize", "prompt"),
)
TEXT_ROUTES = (
    TokenizeRoute("/tokenize", "prompt"),
    TokenizeRoute("/v1/tokenize", "prompt"),
    TokenizeRoute("/tokenize", "tgi_inputs"),
)


def _messages(prompt: Prompt) -> list[dict[str, Any]]:
    if prompt.messages is not None:
        return prompt.messages
    return [{"role": "user", "content": prompt.prompt or ""}]


def ask(client: httpx.Client, route: TokenizeRoute, body: dict[str, Any]) -> int:
    """POST ``body`` to the route; its count, or ``ValueError``/``httpx.HTTPError``."""
    resp = client.post(route.path, json=body, timeout=10.0)
    if resp.status_code != 200:
        raise ValueError(f"{route.path} answered HTTP {resp.status_code}")
    return route.count(resp.json())


def probe_tokenize(client: httpx.Client, model: str, chat: bool) -> TokenizeRoute | None:
    """The first route the target counts a one-message prompt with, or None."""
    for route in CHAT_ROUTES if chat else TEXT_ROUTES:
        try:
            ask(client, route, route.body(model))
        except (httpx.HTTPError, ValueError):
            continue
        return route
    return None


class RemoteCounter:
    """Counts a prompt's tokens with the target (``loadtests.workload.fit.PromptCounter``)."""

    def __init__(
        self,
        target: Target,
        route: TokenizeRoute,
        model: str,
        client: Callable[[], httpx.Client] | None = None,
    ) -> None:
        self.route = route
        self.model = model
        self.templated = route.templated
        self._new_client = client or target.httpx_client
        self._client: httpx.Client | None = None
        self._counts: dict[str, int] = {}
        # prompts being asked for now: a second user waits for the first one's answer
        # (threading.Event: cooperative under gevent's patching)
        self._pending: dict[str, threading.Event] = {}
        self.asked = 0
        self.failures = 0  # in a row
        self.enabled = True

    def __call__(self, prompt: Prompt) -> int | None:
        """The target's count of ``prompt`` (asked once per distinct prompt), or None."""
        if not self.enabled:
            return None
        body = self.route.body(self.model, prompt)
        key = json.dumps(body, sort_keys=True, ensure_ascii=False)
        n = self._counts.get(key)
        if n is not None:
            return n
        asking = self._pending.get(key)
        if asking is not None:  # another user is asking for the same prompt: its answer
            asking.wait(WAIT_S)
            return self._counts.get(key)
        self._pending[key] = asking = threading.Event()
        try:
            return self._ask(key, body)
        finally:
            del self._pending[key]
            asking.set()

    def _ask(self, key: str, body: dict[str, Any]) -> int | None:
        if self._client is None:
            self._client = self._new_client()
        self.asked += 1
        try:
            n = ask(self._client, self.route, body)
        except (httpx.HTTPError, ValueError) as exc:
            self.failures += 1
            if self.failures >= MAX_FAILURES:
                self.enabled = False
                log.warning("target %s stopped counting tokens (%s)", self.route.path, exc)
            return None
        self.failures = 0
        if len(self._counts) >= CACHE_MAX:
            self._counts.clear()
        self._counts[key] = n
        return n

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
