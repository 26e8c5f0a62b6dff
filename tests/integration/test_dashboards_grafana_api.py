"""Push and run annotations against a stand-in for Grafana's HTTP API.

No Grafana server can run on these machines, so ``GrafanaStandIn`` — a real HTTP
server on loopback — plays Grafana: it answers only the endpoints llmload uses
(``POST /api/dashboards/db``, ``POST /api/annotations``, ``PATCH /api/annotations/:id``),
checks each request against Grafana's documented HTTP API (method, path, auth
header, JSON body shape) and records it.  What is *not* covered: Grafana's own
handling of the payloads (rendering, dashboard migration, annotation storage).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from llmload.dashboards import build as builder
from llmload.dashboards.annotations import GrafanaAnnotations
from llmload.dashboards.llm_load import PHASE_TAG, UID
from llmload.loadtests.run.sinks import RecordSink
from tests.fixtures.grafana import STANDIN_TOKEN as TOKEN

ROOT = Path(__file__).resolve().parents[2]


def _push(url: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GRAFANA_")}
    return subprocess.run(
        [sys.executable, "-m", "llmload.dashboards", "push", "--grafana-url", url],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_push_with_a_token_posts_every_dashboard(grafana_standin) -> None:
    srv = grafana_standin()
    done = _push(srv.url, {"GRAFANA_TOKEN": TOKEN})
    assert done.returncode == 0, done.stderr
    assert srv.errors == []
    assert [(r["method"], r["path"]) for r in srv.requests] == [("POST", "/api/dashboards/db")]
    sent = srv.requests[0]
    assert sent["headers"]["Authorization"] == f"Bearer {TOKEN}"
    committed = json.loads((builder.JSON_DIR / builder.DASHBOARDS[0].filename).read_text())
    assert sent["body"]["dashboard"] == {**committed, "id": None}
    assert sent["body"]["overwrite"] is True
    assert f"pushed {UID} version 3" in done.stdout
    assert TOKEN not in done.stdout + done.stderr


def test_push_with_user_and_password_and_a_path_prefix(grafana_standin) -> None:
    srv = grafana_standin(prefix="/grafana")
    done = _push(srv.url + "/", {"GRAFANA_USER": "admin", "GRAFANA_PASSWORD": "pw"})
    assert done.returncode == 0, done.stderr
    assert srv.requests[0]["headers"]["Authorization"].startswith("Basic ")
    assert srv.errors == []


def test_push_refused_or_without_credentials_fails_without_leaking(grafana_standin) -> None:
    srv = grafana_standin()
    done = _push(srv.url, {"GRAFANA_USER": "admin", "GRAFANA_PASSWORD": "wrong-secret"})
    assert done.returncode == 1
    assert "Unauthorized" in done.stderr and "wrong-secret" not in done.stdout + done.stderr
    done = _push(srv.url, {})
    assert done.returncode == 2 and "GRAFANA_TOKEN" in done.stderr


def test_phase_annotations_become_regions(grafana_standin) -> None:
    srv = grafana_standin()
    sink = GrafanaAnnotations(srv.url, token=TOKEN, run_label="ci-42")
    assert isinstance(sink, RecordSink)
    t0 = time.time()
    sink.on_phase("stream", "stream", "start", t0)
    sink.on_phase("stream", "stream", "end", t0 + 61.5)
    sink.close()
    assert srv.errors == [] and sink.posted == 2 and not sink.disabled
    post, patch = srv.requests
    assert (post["method"], post["path"]) == ("POST", "/api/annotations")
    assert post["body"]["time"] == int(t0 * 1000)
    assert post["body"]["dashboardUID"] == UID
    assert post["body"]["tags"] == [PHASE_TAG, "phase:stream", "mode:stream", "run:ci-42"]
    assert (patch["method"], patch["path"]) == ("PATCH", f"/api/annotations/{srv.next_id}")
    assert patch["body"]["time"] == int(t0 * 1000)
    assert patch["body"]["timeEnd"] == int((t0 + 61.5) * 1000)
    assert patch["body"]["tags"] == post["body"]["tags"]
    assert all(r["headers"]["Authorization"] == f"Bearer {TOKEN}" for r in srv.requests)


def test_an_end_without_a_start_posts_a_point(grafana_standin) -> None:
    srv = grafana_standin()
    sink = GrafanaAnnotations(srv.url, user="admin", password="pw", tags=["llmload", "nightly"])
    sink.on_phase("sync", "sync", "end", 1_700_000_000.25)
    assert [(r["method"], r["path"]) for r in srv.requests] == [("POST", "/api/annotations")]
    assert srv.requests[0]["body"]["time"] == 1_700_000_000_250
    assert srv.requests[0]["body"]["tags"][:2] == ["llmload", "nightly"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_grafana_warns_once_and_the_run_goes_on(caplog) -> None:
    sink = GrafanaAnnotations(f"http://127.0.0.1:{_closed_port()}", token=TOKEN)
    caplog.set_level(logging.WARNING, logger="llmload.dashboards.annotations")
    t = time.perf_counter()
    for event in ("start", "end", "start", "end"):
        sink.on_phase("stream", "stream", event, time.time())
    assert time.perf_counter() - t < 5
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "unreachable" in warnings[0].getMessage()
    assert TOKEN not in caplog.text
    assert sink.disabled and sink.posted == 0


def test_grafana_errors_warn_once(grafana_standin, caplog) -> None:
    srv = grafana_standin(status=500)
    sink = GrafanaAnnotations(srv.url, token=TOKEN)
    caplog.set_level(logging.WARNING, logger="llmload.dashboards.annotations")
    sink.on_phase("sync", "sync", "start", time.time())
    sink.on_phase("sync", "sync", "end", time.time())
    assert len(srv.requests) == 1 and sink.disabled
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_credentials_default_to_the_environment(grafana_standin, monkeypatch) -> None:
    monkeypatch.delenv("GRAFANA_TOKEN", raising=False)
    monkeypatch.setenv("GRAFANA_USER", "admin")
    monkeypatch.setenv("GRAFANA_PASSWORD", "pw")
    srv = grafana_standin()
    sink = GrafanaAnnotations(srv.url)
    sink.on_phase("stream", "stream", "start", time.time())
    assert srv.requests[0]["headers"]["Authorization"].startswith("Basic ")
    assert srv.errors == [] and sink.posted == 1
