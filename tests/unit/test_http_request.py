"""The harness's request path without sockets: the request it builds, the connector's addresses."""

from __future__ import annotations

import socket

import httpx
import pytest

from llmload.loadtests.measure.adapters.base import HttpCall
from llmload.loadtests.options import ConnectionOptions
from llmload.loadtests.transport.connect import Connector
from llmload.loadtests.transport.target import Target


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9", "https://user:pw@example.test/llm/v1?key=abc&x=1"]
)
def test_the_fast_request_equals_httpx_build_request(url: str) -> None:
    target = Target(
        ConnectionOptions(target=url, request_timeout=60, stall_timeout=30), {"X-Team": "a"}
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "春天"}], "stream": True}
    call = HttpCall("POST", "/v1/chat/completions", body, {"X-Call": "b"}, stream=True)
    timeout = httpx.Timeout(60, connect=10, read=30)
    with target.httpx_client() as client:
        for _ in range(2):  # the second one reuses the cached URL
            fast = target.request(client, call, timeout)
            slow = client.build_request(
                call.method, call.path, json=call.json, headers=call.headers, timeout=timeout
            )
            assert (fast.method, fast.url, fast.content) == (slow.method, slow.url, slow.content)
            assert fast.headers == slow.headers and fast.extensions == slow.extensions


def test_a_client_holding_cookies_sends_them_back() -> None:
    target = Target(
        ConnectionOptions(target="http://127.0.0.1:9", request_timeout=60, stall_timeout=30), {}
    )
    call = HttpCall("POST", "/v1/chat/completions", {"a": 1}, stream=True)
    with target.httpx_client() as client:
        client.cookies.set("AWSALB", "sticky", domain="127.0.0.1")
        req = target.request(client, call, httpx.Timeout(5))
        assert req.headers.get("cookie") == "AWSALB=sticky"


def test_ip_literals_are_never_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("getaddrinfo called")

    monkeypatch.setattr(socket, "getaddrinfo", boom)
    c = Connector()
    assert c.addresses("127.0.0.1", 80) == [(socket.AF_INET, ("127.0.0.1", 80))]
    assert c.addresses("::1", 80)[0][0] == socket.AF_INET6
    assert c.addresses("[::1]", 80)[0][1][0] == "::1"
    assert c.lookups == 0


def test_names_are_resolved_once_per_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def fake(host: str, port: int, **_k: object) -> list[tuple]:
        calls.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", port))]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    c = Connector(ttl=3600)
    for _ in range(5):
        assert c.addresses("model.internal", 8000) == [(socket.AF_INET, ("10.0.0.7", 8000))]
    assert calls == ["model.internal"] and c.lookups == 1
    c.ttl = 0.0  # expired: asked again (a DNS-balanced target is not pinned)
    c.addresses("model.internal", 8000)
    assert c.lookups == 2


def test_the_address_that_answered_is_tried_first(monkeypatch: pytest.MonkeyPatch) -> None:
    v6 = (socket.AF_INET6, ("::1", 80, 0, 0))
    v4 = (socket.AF_INET, ("127.0.0.1", 80))

    def fake(host: str, port: int, **_k: object) -> list[tuple]:
        return [(fam, socket.SOCK_STREAM, 6, "", addr) for fam, addr in (v6, v4)]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    c = Connector()
    assert c.addresses("localhost", 80) == [v6, v4]
    c._prefer("localhost", 80, v4)  # what connect_tcp does when ::1 refused and 127.0.0.1 answered
    assert c.addresses("localhost", 80) == [v4, v6] and c.lookups == 1


def test_the_cookie_jar_reads_only_responses_that_set_cookies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from llmload.loadtests.transport.target import SetCookieJar

    target = Target(
        ConnectionOptions(target="http://127.0.0.1:9", request_timeout=60, stall_timeout=30), {}
    )
    with target.httpx_client() as client:
        jar = client.cookies
        assert isinstance(jar, SetCookieJar)
    req = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    calls: list[object] = []
    real = httpx.Cookies.extract_cookies
    monkeypatch.setattr(
        httpx.Cookies, "extract_cookies", lambda self, r: (calls.append(r), real(self, r))[1]
    )
    jar.extract_cookies(httpx.Response(200, request=req))  # an LLM server: no cookie
    assert calls == [] and not jar
    sticky = {"set-cookie": "AWSALB=s; Path=/"}
    jar.extract_cookies(httpx.Response(200, headers=sticky, request=req))
    assert len(calls) == 1 and jar.get("AWSALB") == "s"  # a sticky load balancer's cookie kept
