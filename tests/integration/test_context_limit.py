"""Keeping prompt + max_tokens inside a target's context length, against a vLLM stand-in.

A real vLLM cannot start inside ``make test`` (the CPU build takes minutes to
load), so this loopback FastAPI app does what vLLM does at its
context limit: ``/v1/models`` reports ``max_model_len``, and a chat request
whose prompt (counted with the served model's tokenizer and chat template) plus
``max_tokens`` exceeds it is an HTTP 400 before any token.  The default ``mix``
scenario must then run with no error: prompts that cannot fit are skipped and
``max_tokens`` trimmed, counted once in ``run.json`` and on stderr.
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
    app = FastAPI()
    rejected: list[int] = []
    app.state.rejected = rejected

    @app.get("/v1/models")
    async def models() -> Any:
        return {
            "object": "list",
            "data": [{"id": MODEL, "object": "model", "max_model_len": LIMIT}],
        }

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        prompt = _count(tokenizer, body["messages"])
        n = int(body.get("max_tokens") or 16)
        if prompt + n > LIMIT:
            rejected.append(prompt + n)
            msg = (
                f"This model's maximum context length is {LIMIT} tokens. However, you requested "
                f"{prompt + n} tokens ({prompt} in the messages, {n} in the completion)."
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
    assert rec.status == "http_4xx" and "maximum context length is 1100" in (rec.error or "")


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


@pytest.mark.parametrize("counted_by", ["estimate", "tokenizer"])
def test_default_mix_never_fails_by_design(
    vllm: tuple[str, FastAPI], embedded_model: Path, tmp_path: Path, counted_by: str
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
