"""Keeping prompt + max_tokens inside a target's context length, against a vLLM stand-in.

A real vLLM cannot start inside ``make test`` (the CPU build takes minutes to
load), so this loopback FastAPI app does what vLLM does at its
context limit: ``/v1/models`` reports ``max_model_len``, ``POST /tokenize`` counts a
chat request's prompt (vLLM's request and answer shapes: ``messages`` with
``add_generation_prompt`` in, ``count``/``max_model_len``/``tokens`` out), and a chat
request whose prompt (counted with the served model's tokenizer and chat template)
plus ``max_tokens`` exceeds it is an HTTP 400 before any token, in vLLM's words.
The default ``mix`` scenario must then run with no error: prompts that cannot fit
are skipped and ``max_tokens`` trimmed, counted once in ``run.json`` and on stderr —
by the target's own count when it serves ``/tokenize`` (asked once per distinct
prompt), else by ``--tokenizer`` or the byte bound.  A target that does not tell
its context length gets the 400s, and they are ``context_overflow``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from llmload.loadtests.measure.adapters.base import Prompt
from llmload.loadtests.workload import BUILTIN, builtin_items
from llmload.loadtests.workload.fit import ContextFit
from tests.fixtures.drive import ROOT, drive

#: below the Chinese long_summary prompts (~1,300-1,500 tokens), above everything else
LIMIT = 1100
MODEL = "stand-in"


def _count(tokenizer: Any, messages: list[dict[str, Any]]) -> int:
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return len(tokenizer(text).input_ids)


def _vllm_app(tokenizer: Any) -> FastAPI:
    """The stand-in; ``app.state.tokenize`` / ``.tells_limit`` turn its ``/tokenize`` and
    the ``max_model_len`` in ``/v1/models`` off (a test sets them, then restores them)."""
    app = FastAPI()
    rejected: list[int] = []
    app.state.rejected = rejected
    app.state.tokenized = []  # the message lists /tokenize counted, in order
    app.state.tokenize = True
    app.state.tells_limit = True

    @app.get("/v1/models")
    async def models() -> Any:
        card: dict[str, Any] = {"id": MODEL, "object": "model"}
        if app.state.tells_limit:
            card["max_model_len"] = LIMIT
        return {"object": "list", "data": [card]}

    @app.post("/tokenize")
    async def tokenize(request: Request) -> Any:
        if not app.state.tokenize:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        body = await request.json()
        assert body["model"] == MODEL and body["add_generation_prompt"] is True
        app.state.tokenized.append(json.dumps(body["messages"], sort_keys=True))
        text = tokenizer.apply_chat_template(
            body["messages"], add_generation_prompt=True, tokenize=False
        )
        ids = tokenizer(text).input_ids
        return {"count": len(ids), "max_model_len": LIMIT, "tokens": ids, "token_strs": None}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        prompt = _count(tokenizer, body["messages"])
        n = int(body.get("max_tokens") or 16)
        if prompt + n > LIMIT:
            rejected.append(prompt + n)
            msg = (
                f"This model's maximum context length is {LIMIT} tokens. However, you requested "
                f"{n} output tokens and your prompt contains at least {prompt} input tokens, "
                f"for a total of at least {prompt + n} tokens."
            )
            err = {"object": "error", "message": msg, "type": "BadRequestError", "code": 400}
            return JSONResponse(err, status_code=400)
        n = min(n, 4)
        usage = {"prompt_tokens": prompt, "completion_tokens": n}
        if not body.get("stream"):
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": "x" * n},
                "finish_reason": "length",
            }
            return {"object": "chat.completion", "choices": [choice], "usage": usage}

        async def events() -> AsyncIterator[bytes]:
            for i in range(n):
                delta = {
                    "index": 0,
                    "delta": {"content": "x"},
                    "finish_reason": "length" if i == n - 1 else None,
                }
                yield f"data: {json.dumps({'choices': [delta]})}\n\n".encode()
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


@pytest.fixture(scope="module")
def vllm(embedded_tokenizer: Any) -> Iterator[tuple[str, FastAPI]]:
    app = _vllm_app(embedded_tokenizer)
    app.state.tokenizer = embedded_tokenizer
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "vLLM stand-in did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", app
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_stand_in_rejects_what_does_not_fit(vllm: tuple[str, FastAPI]) -> None:
    url, _ = vllm
    rec, _ = drive(url, "openai-chat", prompt="长" * 2000, model=MODEL)
    assert rec.status == "context_overflow" and rec.http_status == 400
    assert "maximum context length is 1100" in (rec.error or "")


def test_the_estimate_never_undercounts_the_embedded_tokenizer(embedded_tokenizer: Any) -> None:
    """The embedded model's 2,048-entry vocabulary is the worst case we know of."""
    fit = ContextFit(LIMIT)
    for name in BUILTIN:
        for item in builtin_items(name):
            messages = item.first_messages()
            real = _count(embedded_tokenizer, messages)
            assert fit.prompt_tokens(Prompt(name, item.item_id, messages=messages)) >= real


def _run(out: Path, url: str, *extra: str) -> tuple[dict[str, Any], str]:
    cmd = [
        sys.executable,
        "-m",
        "llmload.loadtests",
        "run",
        "--out",
        str(out),
        "--target",
        url,
        "--modes",
        "sync,stream",
        "--users",
        "4",
        "--pacing",
        "0s",
        "--duration",
        "2s",
        "--scenario",
        "mix",
        "--seed",
        "3",
        "--status-interval",
        "60",
        *extra,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "summary.json").read_text()), proc.stderr


@pytest.fixture
def no_tokenize(vllm: tuple[str, FastAPI]) -> Iterator[None]:
    """The stand-in without ``/tokenize`` (404, as a server without one) for one test."""
    vllm[1].state.tokenize = False
    try:
        yield
    finally:
        vllm[1].state.tokenize = True


@pytest.mark.parametrize("counted_by", ["estimate", "tokenizer"])
def test_default_mix_never_fails_by_design(
    vllm: tuple[str, FastAPI], embedded_model: Path, tmp_path: Path, counted_by: str, no_tokenize
) -> None:
    url, app = vllm
    app.state.rejected.clear()
    extra = ("--tokenizer", str(embedded_model)) if counted_by == "tokenizer" else ()
    summary, stderr = _run(tmp_path / counted_by, url, *extra)
    for name in ("sync", "stream"):
        phase = summary["phases"][name]
        assert phase["count"] > 0 and phase["errors"] == {}, phase["errors"]
    assert app.state.rejected == []
    fit = json.loads((tmp_path / counted_by / "run.json").read_text())["context_fit"]
    assert fit["context_limit"] == LIMIT and fit["prompt_tokens"] == counted_by
    # the Chinese long_summary prompts cannot fit: skipped, counted, said once
    assert fit["skipped"] > 0 and fit["checked"] > fit["skipped"]
    assert stderr.count("note: context length 1100 tokens:") == 1
    assert "target context length: 1100 tokens" in stderr
    assert app.state.tokenized == [] and "counted by the target" not in stderr


def test_the_targets_own_count_is_asked_once_per_prompt(
    vllm: tuple[str, FastAPI], tmp_path: Path
) -> None:
    """Against a target that serves /tokenize, prompts are fitted by its exact count:
    no 400, fewer prompts given up than the byte bound gives up, one call per prompt."""
    url, app = vllm
    app.state.rejected.clear()
    app.state.tokenized.clear()
    summary, stderr = _run(tmp_path / "target", url, "--warmup", "1s")
    assert app.state.rejected == []
    for name in ("sync", "stream"):
        assert summary["phases"][name]["errors"] == {}
    fit = json.loads((tmp_path / "target" / "run.json").read_text())["context_fit"]
    assert fit["prompt_tokens"] == "target" and fit["checked"] > 0
    assert "prompt tokens counted by the target: POST /tokenize" in stderr
    asked = app.state.tokenized
    assert asked and len(asked) == len(set(asked))  # each distinct prompt once, all phases
    # the byte bound, on the same prompts, gives up on more of them
    bound = ContextFit(LIMIT)
    for name in BUILTIN:
        for item in builtin_items(name):
            bound.fit(Prompt(name, item.item_id, messages=item.first_messages(), max_tokens=128))
    exact = ContextFit(LIMIT, remote=_counter(app))
    for name in BUILTIN:
        for item in builtin_items(name):
            exact.fit(Prompt(name, item.item_id, messages=item.first_messages(), max_tokens=128))
    assert exact.skipped + exact.trimmed < bound.skipped + bound.trimmed


def _counter(app: FastAPI) -> Any:
    """The stand-in's count as a ``PromptCounter`` (its tokenizer and template, in-process)."""
    tokenizer = app.state.tokenizer

    class Exact:
        templated = True

        def __call__(self, prompt: Prompt) -> int:
            return _count(tokenizer, prompt.messages or [])

    return Exact()


def test_a_context_overflow_is_its_own_class_with_the_fix(
    vllm: tuple[str, FastAPI], tmp_path: Path
) -> None:
    """A target that does not tell its context length: the requests that do not fit are
    refused, recorded as ``context_overflow`` (not ``http_4xx``), and the phase's
    diagnostic says what to change."""
    url, app = vllm
    data = tmp_path / "prompts.jsonl"
    rows = [{"prompt": "长" * 2000, "max_tokens": 16}, {"prompt": "hello", "max_tokens": 16}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    app.state.tells_limit = False
    try:
        summary, _ = _run(tmp_path / "over", url, "--dataset", str(data))
    finally:
        app.state.tells_limit = True
    records = [
        json.loads(line) for line in (tmp_path / "over" / "requests.jsonl").read_text().splitlines()
    ]
    over = [r for r in records if r["status"] == "context_overflow"]
    assert over and all(r["http_status"] == 400 for r in over)
    assert {r["status"] for r in records} == {"ok", "context_overflow"}
    assert "maximum context length is 1100" in over[0]["error"]
    phase = summary["phases"]["stream"]
    assert phase["errors"] == {"context_overflow": sum(r["phase"] == "stream" for r in over)}
    [diag] = [d for d in phase["diagnostics"] if d["code"] == "context_overflow"]
    assert "--max-tokens" in diag["hint"] and "/tokenize" in diag["hint"]


@pytest.mark.parametrize("where", ["local", "workers"])
def test_a_run_where_no_prompt_fits_fails_and_says_why(
    vllm: tuple[str, FastAPI], tmp_path: Path, where: str
) -> None:
    """A phase that asks for N requests and no time limit ends once it is clear that none
    can be sent (it waited forever).  With ``--workers`` the prompts are fitted on the
    workers: their counts reach the master."""
    url, app = vllm
    data = tmp_path / "long.jsonl"
    data.write_text(json.dumps({"prompt": "长" * 2000, "max_tokens": 64}) + "\n")
    users = ("--users", "4") if where == "local" else ("--users", "4", "--workers", "2")
    cmd = [
        sys.executable,
        "-m",
        "llmload.loadtests",
        "run",
        "--out",
        str(tmp_path / "run"),
        "--target",
        url,
        "--modes",
        "stream",
        *users,
        "--pacing",
        "0s",
        "--num-prompts",
        "5",
        "--dataset",
        str(data),
        "--status-interval",
        "60",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "no prompt fits the target's context length (1100 tokens)" in proc.stderr
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    fit = run["context_fit"]
    assert run["status"] == "failed" and fit["skipped"] == fit["checked"] > 0, fit
    assert fit["context_limit"] == 1100 and fit["trimmed"] == 0
