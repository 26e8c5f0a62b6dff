"""The bundled server's Responses and Messages APIs, read by the official SDKs.

``openai`` (``responses.stream`` / ``responses.create``) and ``anthropic``
(``messages.stream`` / ``messages.create``) are the reference parsers of these
shapes: their stream helpers check the order of events (an item before its
deltas, a block's index, one identity per response) and build the final object
from the deltas, so a wrong event fails here.  Errors are each API's own shape.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.fixtures.drive import ROOT, loadtest
from tests.fixtures.server_proc import start_server_process

KEY = "sk-test-key"
FN = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
TOOL = {"name": "lookup", "input_schema": {"type": "object", "properties": {}}}


@pytest.fixture(scope="module")
def server():
    proc = start_server_process(
        "--ttft-ms", "5", "--itl-ms", "1", "--reasoning-tokens", "3", "--api-key", KEY
    )
    yield proc
    proc.stop()


@pytest.fixture
def oai(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)


@pytest.fixture
def claude(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)


def seeded(low: int, high: int) -> tuple[int, int]:
    """A request ``seed`` whose answer the synthetic engine ends before ``high`` tokens
    (it draws the length from ``random.Random(seed)`` between min_tokens and the
    maximum), and that length: a "completed" answer of a known size."""
    seed = next(s for s in range(1000) if random.Random(s).randint(low, high) < high)
    return seed, random.Random(seed).randint(low, high)


def model_of(oai: openai.OpenAI) -> str:
    return oai.models.list().data[0].id


def test_openai_sdk_reads_a_responses_stream(oai: openai.OpenAI) -> None:
    model = model_of(oai)
    seed, n = seeded(6, 10)
    extra = {"seed": seed, "min_tokens": 6}
    with oai.responses.stream(
        model=model, input="hello", max_output_tokens=10, extra_body=extra
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    texts = kinds.count("response.output_text.delta")
    assert kinds.count("response.reasoning_text.delta") == 3 and texts == n - 3
    assert final.status == "completed" and [o.type for o in final.output] == [
        "reasoning",
        "message",
    ]
    assert final.usage is not None and final.usage.output_tokens == 3 + texts
    assert final.usage.output_tokens_details.reasoning_tokens == 3
    assert len(final.output_text) > 0


def test_openai_sdk_reads_bodies_tool_calls_and_chains(oai: openai.OpenAI) -> None:
    model = model_of(oai)
    seed, _ = seeded(1, 8)
    first = oai.responses.create(
        model=model, input="hi", max_output_tokens=8, extra_body={"seed": seed}, store=True
    )
    assert first.status == "completed" and first.usage is not None
    follow = oai.responses.create(
        model=model, input="and then?", previous_response_id=first.id, max_output_tokens=4
    )
    assert follow.usage is not None
    assert follow.usage.input_tokens > first.usage.input_tokens  # the stored turn came first
    with oai.responses.stream(
        model=model,
        input="call it",
        tools=[FN],
        tool_choice="required",
        max_output_tokens=8,
        extra_body={"ignore_eos": True},  # 8 tokens: 3 of reasoning, then the call
    ) as stream:
        final = stream.get_final_response()
    call = final.output[-1]
    assert call.type == "function_call" and call.name == "lookup" and call.arguments
    cut = oai.responses.create(
        model=model, input="x", max_output_tokens=4, extra_body={"ignore_eos": True}
    )
    assert cut.status == "incomplete" and cut.incomplete_details is not None
    with pytest.raises(openai.BadRequestError, match="not found"):
        oai.responses.create(model=model, input="x", previous_response_id="resp_nope")
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        oai.responses.create(model="no-such-model", input="x")


def test_anthropic_sdk_reads_a_messages_stream(claude: anthropic.Anthropic, oai) -> None:
    model = model_of(oai)
    with claude.messages.stream(
        model=model,
        max_tokens=10,
        system="be brief",
        messages=[{"role": "user", "content": "hello"}],
        extra_body={"min_tokens": 10},  # vLLM's extension: exactly 10 tokens
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 10
    assert final.usage.input_tokens > 0
    with claude.messages.stream(
        model=model,
        max_tokens=8,
        messages=[{"role": "user", "content": "call it"}],
        tools=[TOOL],
        tool_choice={"type": "any"},
        extra_body={"ignore_eos": True},  # 8 tokens: 3 of reasoning, then the call
    ) as stream:
        final = stream.get_final_message()
    use = final.content[-1]
    assert final.stop_reason == "tool_use" and use.type == "tool_use" and use.name == "lookup"
    assert isinstance(use.input, dict)  # the input_json_delta pieces made JSON


def test_anthropic_sdk_bodies_and_errors(claude: anthropic.Anthropic, oai, server) -> None:
    model = model_of(oai)
    message = claude.messages.create(
        model=model, max_tokens=4, messages=[{"role": "user", "content": "hi"}]
    )
    assert message.type == "message" and message.usage.output_tokens <= 4
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(model=model, max_tokens=0, messages=[])
    assert err.value.body["type"] == "error"  # type: ignore[index]
    assert err.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    wrong = anthropic.Anthropic(base_url=server.url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        wrong.messages.create(
            model=model, max_tokens=4, messages=[{"role": "user", "content": "x"}]
        )
    # a malformed body: Anthropic's error object, never a traceback
    r = httpx.post(server.url + "/v1/messages", content=b"{not json", headers={"x-api-key": KEY})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert "malformed JSON" in r.json()["error"]["message"]


def test_at_capacity_messages_says_529_overloaded() -> None:
    proc = start_server_process(
        "--ttft-ms", "400", "--itl-ms", "1", "--max-concurrency", "1", "--max-queue", "0"
    )
    try:
        body = {"max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}
        with httpx.Client(base_url=proc.url, timeout=10) as client:
            with client.stream("POST", "/v1/messages", json={**body, "stream": True}) as held:
                second = client.post("/v1/messages", json=body)
                held.read()
        assert second.status_code == 529
        assert second.json()["error"]["type"] == "overloaded_error"
        with httpx.Client(base_url=proc.url, timeout=10) as client:
            with client.stream("POST", "/v1/messages", json={**body, "stream": True}):
                chat = {"messages": body["messages"], "max_tokens": 4}
                assert client.post("/v1/chat/completions", json=chat).status_code == 429
    finally:
        proc.stop()


def test_llmload_run_chains_by_previous_response_id_and_sends_the_key(
    server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path users run: ``llmload run --responses-chain previous`` (later turns send only
    themselves and name the last answer; an id the server did not keep would be a 400, and
    its stored history is in the later turns' prompts: the body's shape is pinned in
    ``tests/unit/test_adapters_named.py``), and ``--api-key-env`` as Anthropic's
    ``x-api-key`` (the server requires it) — never written into the run's files."""
    monkeypatch.setenv("LLMLOAD_TEST_KEY", KEY)
    run = ("--users", "2", "--spawn-rate", "2", "--pacing", "0.2s", "--duration", "3s")
    run += ("--modes", "stream", "--scenario", "short_qa", "--max-tokens", "8")
    run += ("--api-key-env", "LLMLOAD_TEST_KEY")
    chained = tmp_path / "chained"
    args = ("--protocol", "openai-responses", "--responses-chain", "previous", "--turns", "3")
    loadtest(chained, "--target", server.url, *args, *run)
    recs = [json.loads(line) for line in (chained / "requests.jsonl").read_text().splitlines()]
    assert recs and all(r["status"] == "ok" for r in recs)
    by_turn: dict[int, list[int]] = {}
    for r in recs:
        by_turn.setdefault(r["turn"], []).append(r["prompt_tokens"])
    assert set(by_turn) == {0, 1, 2}
    assert min(by_turn[2]) > max(by_turn[0])  # earlier turns are in the prompt
    assert json.loads((chained / "run.json").read_text())["responses_chain"] == "previous"
    messages = tmp_path / "messages"
    loadtest(messages, "--target", server.url, "--protocol", "anthropic-messages", *run)
    recs = [json.loads(line) for line in (messages / "requests.jsonl").read_text().splitlines()]
    assert recs and all(r["status"] == "ok" for r in recs)  # the server checked x-api-key
    # what the newer API costs, side by side: report compare names what differs
    cmd = [sys.executable, "-m", "llmload", "report", "compare", str(chained), str(messages)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    md = (messages / "compare.md").read_text()
    assert "--protocol: A openai-responses, B anthropic-messages (shapes the numbers)" in md
    assert "## stream" in md and "TTFT p95 (ms)" in md
    assert "What differs" in (messages / "compare.html").read_text()
    for out in (chained, messages):
        for path in out.iterdir():
            if path.is_file():
                assert KEY.encode() not in path.read_bytes(), path
