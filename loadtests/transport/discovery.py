"""What the target says about itself, read once at start-up before any user starts.

``discover`` asks the target what the adapters cannot know from the options:

* a Gradio app's chat endpoint (``/gradio_api/info``, see
  ``loadtests.measure.adapters.gradio.choose_endpoint``) and whether it takes Gradio 6's
  named-parameter call form (``/config``'s ``version``);
* an OpenAI-style server's context length (``/v1/models``: vLLM's
  ``max_model_len``, or a similar key; TGI's ``/info`` ``max_total_tokens``) for
  ``loadtests.workload.fit``, and, when it has one, which ``/tokenize`` endpoint
  counts a prompt's tokens with the served model's tokenizer
  (``loadtests.transport.tokenize``);
* the server's version, where it says one (``server_version``: vLLM's and the
  bundled server's ``/version``, TGI's ``/info``, SGLang's ``/get_server_info``),
  which ``run.json`` records and the gate's fingerprint compares.

A wrong ``--api-name`` or an app whose chat endpoint cannot be told is a
``ValueError`` naming the app's endpoints: the run stops before it starts,
never runs into 100 % errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from llmload.loadtests.measure.adapters import gradio
from llmload.loadtests.measure.adapters.base import sends_messages
from llmload.loadtests.transport.target import Target
from llmload.loadtests.transport.tokenize import TokenizeRoute, probe_tokenize

#: where servers say their version (vLLM and the bundled server, TGI, SGLang), in order
VERSION_PAGES = ("/version", "/info", "/get_server_info")
#: keys under which servers report a model's context length in ``/v1/models``
CONTEXT_KEYS = ("max_model_len", "context_length", "max_context_length", "context_window")


@dataclass(frozen=True, slots=True)
class TargetFacts:
    """What ``discover`` learned: adapter options, context length, lines for the user."""

    adapter_options: dict[str, Any] = field(default_factory=dict)
    context_limit: int | None = None
    notes: tuple[str, ...] = ()
    #: the target's token-counting endpoint (None: it has none; only asked with a limit)
    tokenize: TokenizeRoute | None = None


def context_length(models: Any, model: str) -> int | None:
    """The served context length of ``model`` in a ``/v1/models`` answer (None: not told)."""
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list):
        return None
    entries = [m for m in data if isinstance(m, dict)]
    entry = next((m for m in entries if m.get("id") == model), None)
    if entry is None and len(entries) == 1:
        entry = entries[0]
    if entry is None:
        return None
    for key in CONTEXT_KEYS:
        value = entry.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _get_json(client: httpx.Client, path: str) -> Any:
    """``GET path`` as JSON, or None when the target has no such page."""
    try:
        resp = client.get(path, timeout=10.0)
        return resp.json() if resp.status_code == 200 else None
    except (httpx.TransportError, ValueError):
        return None


def _gradio_major(config: Any) -> int | None:
    version = config.get("version") if isinstance(config, dict) else None
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return None


def discover_gradio(client: httpx.Client, api_name: str | None) -> TargetFacts:
    """The app's chat endpoint and call form (``ValueError`` when it cannot be chosen)."""
    info = _get_json(client, gradio.INFO_PATH)
    if info is None:
        if api_name:
            note = f"gradio: {gradio.INFO_PATH} unreadable; calling /{api_name.strip('/')} as given"
            return TargetFacts({"api_name": api_name.strip("/")}, notes=(note,))
        raise ValueError(
            f"gradio: the app's API description ({gradio.INFO_PATH}) could not be read; "
            "pass the chat fn's endpoint with --api-name"
        )
    endpoint = gradio.choose_endpoint(info, api_name)
    v2 = (_gradio_major(_get_json(client, "/config")) or 0) >= 6
    filled = {endpoint.params[0] if endpoint.params else gradio.MESSAGE, gradio.MESSAGE}
    missing = [p for p in endpoint.required if p not in filled | {gradio.HISTORY}]
    if missing:
        raise ValueError(
            f"gradio: /{endpoint.api_name} also needs {', '.join(missing)}, which llmload "
            "cannot fill; give those inputs defaults or pick another endpoint with --api-name"
        )
    how = "named parameters, /gradio_api/call/v2" if v2 and endpoint.params else "data list"
    chosen = "as asked" if api_name else f"chosen from {gradio.INFO_PATH}"
    note = f"gradio: chat endpoint /{endpoint.api_name} ({chosen}; {how})"
    return TargetFacts(endpoint.options(v2), notes=(note,))


def discover(target: Target, protocol: str, model: str, api_name: str | None = None) -> TargetFacts:
    """Everything the target tells about itself that the run needs (one client, a few GETs)."""
    with target.httpx_client() as client:
        if protocol == "gradio":
            return discover_gradio(client, api_name)
        limit, where = context_length(_get_json(client, "/v1/models"), model), "/v1/models"
        if limit is None:
            limit, where = tgi_context_length(_get_json(client, "/info")), "/info"
        route = None
        if limit is not None:
            route = probe_tokenize(client, model, chat=sends_messages(protocol))
    if limit is None:
        return TargetFacts()
    notes = [f"target context length: {limit} tokens ({where}); prompt + max_tokens kept inside"]
    if route is not None:
        how = "chat template applied" if route.templated else "message texts"
        notes.append(f"prompt tokens counted by the target: POST {route.path} ({how})")
    return TargetFacts(context_limit=limit, notes=tuple(notes), tokenize=route)


def tgi_context_length(info: Any) -> int | None:
    """TGI's ``/info``: ``max_total_tokens`` (prompt + new tokens), else None."""
    value = info.get("max_total_tokens") if isinstance(info, dict) else None
    return value if type(value) is int and value > 0 else None


def server_version(target: Target) -> dict[str, str] | None:
    """``{"version", "from"}``: the first of ``VERSION_PAGES`` that names a version, or None."""
    with target.httpx_client() as client:
        for path in VERSION_PAGES:
            doc = _get_json(client, path)
            version = doc.get("version") if isinstance(doc, dict) else None
            if isinstance(version, str | int | float) and str(version):
                return {"version": str(version), "from": path}
    return None
