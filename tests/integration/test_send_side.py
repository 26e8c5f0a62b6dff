"""The send side of a request, measured by both HTTP clients against the bundled server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.fixtures.drive import drive


@pytest.mark.parametrize("client", ["http1", "httpx"])
def test_each_record_says_when_its_request_was_written(
    start_server: Callable[..., Any], client: str
) -> None:
    server = start_server(ttft_ms=80, itl_ms=5)
    model = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
    first, _ = drive(server.url, "openai-chat", http_client=client, model=model)
    # t0 -> last byte written: after the connection was set up, well before the first token
    assert first.send_s is not None and first.connect_s is not None
    assert first.connect_s <= first.send_s < (first.ttft_s or 0) - 0.05
    sync, _ = drive(server.url, "openai-chat", mode="sync", http_client=client, model=model)
    assert sync.send_s is not None and 0 < sync.send_s < (sync.e2e_s or 0)


def test_the_bundled_server_says_its_version(start_server: Callable[..., Any]) -> None:
    server = start_server(ttft_ms=0, itl_ms=0)
    body = httpx.get(server.url + "/version", timeout=10).json()
    assert body["server"] == "llmload" and body["version"]
