"""Every generation and pooling endpoint also answers through the framework's routes.

The server serves ``POST`` to its endpoints before the framework (``direct``) unless
the scope has a ``root_path`` (a proxy's prefix, ``uvicorn --root-path``): then the
framework's route to the same handler answers.  Driven in-process (Starlette's test
client), synthetic engine.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from llmload.target_server.app import build_app
from llmload.target_server.engine import build_engine
from llmload.target_server.pooling import POOLING_ENDPOINTS
from llmload.target_server.schemas import GENERATION_ENDPOINTS
from llmload.target_server.settings import Settings

BODIES = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    "/v1/completions": {"prompt": "hi", "max_tokens": 2},
    "/v1/responses": {"input": "hi", "max_output_tokens": 2},
    "/v1/messages": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    "/v1/embeddings": {"input": ["hi", "there"]},
    "/v1/rerank": {"query": "hi", "documents": ["hi", "there"]},
    "/v2/rerank": {"query": "hi", "documents": ["hi", "there"]},
}


@pytest.mark.parametrize("root_path", ["", "/api"])
def test_every_endpoint_answers_with_and_without_a_root_path(root_path: str) -> None:
    assert set(BODIES) == {*GENERATION_ENDPOINTS, *POOLING_ENDPOINTS}
    settings = Settings(engine="synthetic", ttft_ms=1.0, itl_ms=1.0)
    app = build_app(build_engine(settings), settings)
    with TestClient(app, root_path=root_path) as client:
        for endpoint, body in BODIES.items():
            r = client.post(root_path + endpoint, json=body)
            assert r.status_code == 200, (endpoint, r.text)
            bad = client.post(root_path + endpoint, content=b"{nope")
            assert bad.status_code == 400 and "malformed JSON" in bad.text, endpoint
