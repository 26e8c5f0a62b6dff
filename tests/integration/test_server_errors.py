"""Every bad-input case answers an OpenAI error object with the right status (real HTTP)."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from llmload.target_server.settings import MAX_BODY_BYTES

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
MSG = [{"role": "user", "content": "hi"}]


def assert_error(r: httpx.Response, status: int, type_: str, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == type_ and err["message"]
    if param is not None:
        assert err["param"] == param
    return err


@pytest.fixture
def server(start_server):
    return start_server(ttft_ms=1, itl_ms=1, max_context=64, max_output_tokens=32)


@pytest.mark.parametrize(
    ("path", "content", "param"),
    [
        (CHAT, b"{not json", None),
        (CHAT, b"[1, 2]", None),
        (COMP, b"\xff\xfe", None),
        (CHAT, b'{"messages": "hello"}', "messages"),
        (CHAT, b'{"messages": []}', "messages"),
        (CHAT, b'{"messages": [{"role": "wizard", "content": "x"}]}', "messages.0.role"),
        (COMP, b'{"max_tokens": 3}', "prompt"),
        (COMP, b'{"prompt": "x", "max_tokens": "many"}', "max_tokens"),
        (COMP, b'{"prompt": "x", "temperature": 9}', "temperature"),
        (COMP, b'{"prompt": "x", "n": 2}', "n"),
        (COMP, b'{"prompt": ["a", "b"]}', "prompt"),
        (COMP, b'{"prompt": "x", "max_tokens": 0}', "max_tokens"),
        (COMP, b'{"prompt": "x", "max_tokens": -3}', "max_tokens"),
        (COMP, b'{"prompt": "x", "max_tokens": 33}', "max_tokens"),
        (
            CHAT,
            b'{"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0}',
            "max_completion_tokens",
        ),
        (COMP, b'{"prompt": "x", "max_tokens": 4, "min_tokens": 5}', "min_tokens"),
    ],
)
def test_bad_request_400(server, path, content, param):
    r = httpx.post(server.url + path, content=content, headers={"content-type": "application/json"})
    err = assert_error(r, 400, "invalid_request_error", param)
    assert "Traceback" not in err["message"]


def test_prompt_longer_than_context(server):
    r = httpx.post(server.url + COMP, json={"prompt": "x" * 4 * 65, "max_tokens": 1})
    err = assert_error(r, 400, "invalid_request_error", "prompt")
    assert err["code"] == "context_length_exceeded"
    r = httpx.post(server.url + CHAT, json={"messages": [{"role": "user", "content": "y" * 400}]})
    assert_error(r, 400, "invalid_request_error", "messages")
    # fits alone, but not with the tokens asked for
    r = httpx.post(server.url + COMP, json={"prompt": "x" * 4 * 40, "max_tokens": 30})
    assert_error(r, 400, "invalid_request_error", "max_tokens")
    # the same prompt without max_tokens: the default shrinks to what fits (64 - 40)
    r = httpx.post(server.url + COMP, json={"prompt": "x" * 4 * 40, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 24
    # a prompt that fills the whole context leaves no room for any output
    r = httpx.post(server.url + COMP, json={"prompt": "x" * 4 * 64})
    assert_error(r, 400, "invalid_request_error", "prompt")


def test_unknown_model_404(server):
    r = httpx.post(server.url + CHAT, json={"model": "gpt-17", "messages": MSG})
    err = assert_error(r, 404, "not_found_error", "model")
    assert err["code"] == "model_not_found"


def test_body_over_limit_413_by_content_length(server):
    body = b'{"prompt": "' + b"x" * MAX_BODY_BYTES + b'"}'
    r = httpx.post(server.url + COMP, content=body, headers={"content-type": "application/json"})
    assert_error(r, 413, "invalid_request_error")


def test_body_over_limit_413_when_streamed(server):
    def chunks():  # chunked transfer: no Content-Length, 4 MiB + 1 byte in all
        yield b'{"prompt": "'
        left = MAX_BODY_BYTES + 1 - len(b'{"prompt": "')
        while left > 0:
            n = min(left, 65536)
            yield b"x" * n
            left -= n

    r = httpx.post(server.url + COMP, content=chunks(), timeout=30)
    assert "content-length" not in r.request.headers
    assert_error(r, 413, "invalid_request_error")


def test_body_at_limit_is_read(server):
    body = b'{"prompt": "x", "max_tokens": 1, "pad": "' + b" " * 1000 + b'"}'
    r = httpx.post(server.url + COMP, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200


def test_api_key_401_constant_time_compare(start_server):
    srv = start_server(api_key="s3cret-key", ttft_ms=1, itl_ms=1)
    body = {"messages": MSG, "max_tokens": 1}
    assert_error(httpx.post(srv.url + CHAT, json=body), 401, "authentication_error")
    wrong = {"authorization": "Bearer s3cret-kez"}
    assert_error(httpx.post(srv.url + CHAT, json=body, headers=wrong), 401, "authentication_error")
    assert_error(httpx.get(srv.url + "/v1/models"), 401, "authentication_error")
    ok = {"authorization": "Bearer s3cret-key"}
    assert httpx.post(srv.url + CHAT, json=body, headers=ok).status_code == 200
    assert httpx.get(srv.url + "/v1/models", headers=ok).status_code == 200
    assert httpx.get(srv.url + "/health").status_code == 200  # probes need no key
    assert (
        srv.metric("llmserve_requests_total", endpoint=CHAT, stream="false", status="unauthorized")
        == 2
    )


def test_wrong_method_and_path_use_openai_shape(server):
    assert_error(httpx.get(server.url + CHAT), 405, "invalid_request_error")
    assert_error(httpx.get(server.url + "/v1/nothing"), 404, "not_found_error")


def test_bad_requests_are_counted(server):
    httpx.post(server.url + CHAT, content=b"{", headers={"content-type": "application/json"})
    httpx.post(server.url + CHAT, json={"model": "nope", "messages": MSG, "stream": True})
    labels = {"endpoint": CHAT}
    assert (
        server.metric("llmserve_requests_total", **labels, stream="false", status="bad_request")
        == 1
    )
    assert (
        server.metric("llmserve_requests_total", **labels, stream="true", status="not_found") == 1
    )


def test_client_gone_while_sending_the_body_is_cancelled(server):
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        head = f"POST {COMP} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
        sock.sendall(head.encode() + b'{"prompt": "')
        time.sleep(0.05)
    labels = {"endpoint": COMP, "stream": "false", "status": "cancelled"}
    deadline = time.monotonic() + 3
    while server.metric("llmserve_requests_total", **labels) != 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_validator_that_raises_is_a_counted_500_with_an_error_object(server, monkeypatch):
    import llmload.target_server.app

    def broken(*args, **kwargs):
        raise RuntimeError("a validator bug")

    monkeypatch.setattr(llmload.target_server.app, "parse_request", broken)
    err = assert_error(httpx.post(server.url + COMP, json={"prompt": "x"}), 500, "server_error")
    assert err["code"] == "internal_error" and "a validator bug" not in err["message"]
    assert (
        server.metric("llmserve_requests_total", endpoint=COMP, stream="false", status="error") == 1
    )
