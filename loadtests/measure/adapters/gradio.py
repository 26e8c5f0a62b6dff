"""Gradio apps through their HTTP API (``gr.ChatInterface``, ``gr.Interface``, Blocks).

Two steps: ``POST /gradio_api/call/<api_name>`` with ``{"data": [...]}`` answers
``{"event_id": ...}``; ``GET /gradio_api/call/<api_name>/<event_id>`` then streams
SSE events ``generating`` / ``complete`` / ``error`` / ``heartbeat`` whose data is
the fn's outputs as a JSON list.  A streaming fn's updates are cumulative (the
whole reply so far), so each event's new text is the suffix past what was seen;
an update that does not extend the previous one (a fn that yields deltas, like
the seeds' ``predict_stream``) counts whole.  A non-streaming fn sends one
``complete``.  Gradio reports no token usage.

Which fn: Gradio names a ``ChatInterface``'s endpoint after its function
(``fn=predict_stream`` -> ``/predict_stream``), not ``chat``.  At start-up the
runner reads the app's ``/gradio_api/info`` and ``choose_endpoint`` picks the
chat endpoint (the one asked for, else the only named one, else the one whose
input is ChatInterface's ``message``) or fails with the app's endpoint list.
Gradio 6 also takes ``POST /gradio_api/call/v2/<api_name>`` with *named*
parameters (``{"message": ..., "history": ...}``; parameters with defaults may
be left out); options ``gradio_v2`` and ``gradio_params`` select that form.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from llmload.loadtests.measure.adapters.base import EventInfo, HttpCall, Prompt, register
from llmload.loadtests.measure.record import Mode

CALL_PREFIX = "/gradio_api/call"
INFO_PATH = "/gradio_api/info"
#: the input name of a ``gr.ChatInterface`` endpoint
MESSAGE = "message"
HISTORY = "history"


@dataclass(frozen=True, slots=True)
class GradioEndpoint:
    """The app's chat endpoint as ``/gradio_api/info`` describes it."""

    api_name: str
    #: its parameter names, in order (Gradio 6 ``parameter_name``; empty when not given)
    params: tuple[str, ...] = ()
    #: parameters without a default, which a call must fill
    required: tuple[str, ...] = ()

    def options(self, v2: bool) -> dict[str, Any]:
        """The adapter options that call this endpoint (``v2``: named parameters)."""
        if v2 and self.params:
            return {"api_name": self.api_name, "gradio_v2": True, "gradio_params": self.params}
        return {"api_name": self.api_name}


def endpoints(info: Any) -> dict[str, GradioEndpoint]:
    """The named endpoints of a ``/gradio_api/info`` answer, by api_name (no slash)."""
    named = info.get("named_endpoints") if isinstance(info, dict) else None
    if not isinstance(named, dict):
        raise ValueError("gradio: /gradio_api/info has no 'named_endpoints'")
    out: dict[str, GradioEndpoint] = {}
    for name, spec in named.items():
        params = spec.get("parameters") if isinstance(spec, dict) else None
        names, required = [], []
        for p in params if isinstance(params, list) else []:
            pname = p.get("parameter_name") if isinstance(p, dict) else None
            if isinstance(pname, str):
                names.append(pname)
                if not p.get("parameter_has_default"):
                    required.append(pname)
        api = str(name).strip("/")
        out[api] = GradioEndpoint(api, tuple(names), tuple(required))
    return out


def choose_endpoint(info: Any, requested: str | None) -> GradioEndpoint:
    """The chat endpoint to load-test, or ``ValueError`` naming the app's endpoints."""
    found = endpoints(info)
    listing = ", ".join(f"/{n}" for n in found) or "none"
    if requested:
        name = requested.strip("/")
        if name in found:
            return found[name]
        raise ValueError(
            f"gradio: the app has no API endpoint /{name}; its endpoints: {listing} "
            "(pass one with --api-name)"
        )
    if len(found) == 1:
        return next(iter(found.values()))
    chats = [e for e in found.values() if e.params[:1] == (MESSAGE,)]
    if len(chats) == 1:
        return chats[0]
    if "chat" in found:
        return found["chat"]
    raise ValueError(
        f"gradio: cannot tell which endpoint is the chat; the app's endpoints: {listing} "
        "(pass one with --api-name)"
    )


def text_of(value: Any) -> str:
    """The reply text inside one Gradio output value (str, message dict, history list)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if "content" in value:
            return text_of(value["content"])
        if "text" in value:
            return text_of(value["text"])
        return ""
    if isinstance(value, list):
        if value and all(isinstance(v, dict) and "role" in v for v in value):
            replies = [v for v in value if v.get("role") == "assistant"]
            return text_of(replies[-1]) if replies else ""
        return "".join(text_of(v) for v in value)
    return str(value)


def _message_and_history(prompt: Prompt) -> tuple[str, list[dict[str, str]]]:
    """Split a prompt into ChatInterface's ``message`` and messages-format ``history``."""
    if prompt.messages:
        turns = [m for m in prompt.messages if m.get("role") in ("user", "assistant")]
        if turns and turns[-1].get("role") == "user":
            history = [{"role": m["role"], "content": text_of(m)} for m in turns[:-1]]
            return text_of(turns[-1]), history
        return text_of(prompt.messages[-1]), []
    return prompt.prompt or "", []


@register("gradio")
class GradioAdapter:
    """Streams a Gradio fn's reply; diffs cumulative updates into new text."""

    name = "gradio"

    def __init__(self) -> None:
        self.api_name = "chat"
        self.endpoint = f"{CALL_PREFIX}/{self.api_name}"
        self._mode: Mode = "stream"
        self._seen = ""

    def build(self, prompt: Prompt, *, mode: Mode, model: str, options: dict[str, Any]) -> HttpCall:
        """Step one: join the app's queue.  ``options["api_name"]`` picks the fn (default chat);
        ``gradio_v2`` + ``gradio_params`` send Gradio 6's named-parameter form."""
        self.api_name = str(options.get("api_name") or "chat").strip("/")
        self._mode = mode
        self._seen = ""
        message, history = _message_and_history(prompt)
        params = options.get("gradio_params")
        if options.get("gradio_v2") and params:
            self.endpoint = f"{CALL_PREFIX}/v2/{self.api_name}"
            body: dict[str, Any] = {MESSAGE if MESSAGE in params else params[0]: message}
            if HISTORY in params:
                body[HISTORY] = history
            return HttpCall("POST", self.endpoint, body)
        self.endpoint = f"{CALL_PREFIX}/{self.api_name}"
        data: list[Any] = [message, history] if history else [message]
        return HttpCall("POST", self.endpoint, {"data": data})

    def follow_up(self, first_response_body: bytes) -> HttpCall:
        """Step two: the event stream of the queued call."""
        try:
            event_id = json.loads(first_response_body)["event_id"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"gradio: no event_id in {first_response_body[:200]!r}") from exc
        self._seen = ""
        path = f"{self.endpoint}/{event_id}"
        return HttpCall("GET", path, None, stream=self._mode == "stream")

    def parse_event(self, event: str | None, data: str) -> EventInfo:
        """One SSE event of step two."""
        if event in (None, "heartbeat") and data.strip() in ("", "null"):
            return EventInfo()
        if event == "error":
            return EventInfo(error=_error_text(data), done=True)
        try:
            outputs = json.loads(data)
        except ValueError as exc:
            raise ValueError(f"gradio: bad event data {data[:200]!r}") from exc
        if event not in ("generating", "complete"):
            raise ValueError(f"gradio: unexpected event {event!r}")
        text = text_of(outputs[0] if isinstance(outputs, list) and outputs else outputs)
        new = text[len(self._seen) :] if text.startswith(self._seen) else text
        self._seen = text
        if event == "complete":
            return EventInfo(content=new, finish_reason="stop", done=True)
        return EventInfo(content=new)

    def parse_body(self, body: bytes) -> EventInfo:
        """A whole step-two body (sync mode): the reply is everything its events added."""
        parts: list[str] = []
        error: str | None = None
        done = False
        for event, data in _sse_events(body.decode("utf-8", errors="replace")):
            info = self.parse_event(event, data)
            parts.append(info.content)
            error = error or info.error
            done = done or info.done
        if not done:
            raise ValueError("gradio: the stream ended without complete or error")
        return EventInfo(
            content="".join(parts),
            error=error,
            finish_reason=None if error else "stop",
            done=True,
        )


def _error_text(data: str) -> str:
    """Gradio's error payload (null, a JSON string, or an object) as one line."""
    try:
        value = json.loads(data)
    except ValueError:
        return data.strip() or "gradio error"
    if isinstance(value, dict):
        value = value.get("error") or value.get("message") or value
    return str(value) if value not in (None, "") else "gradio error"


def _sse_events(text: str) -> list[tuple[str | None, str]]:
    """Split an SSE body into (event name, joined data) pairs."""
    events: list[tuple[str | None, str]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        if name is not None or data:
            events.append((name, "\n".join(data)))
    return events
