"""Push and run annotations against a stand-in for Grafana's HTTP API.

No Grafana server can run on these machines, so ``GrafanaStandIn`` — a real HTTP
server on loopback — plays Grafana: it answers only the endpoints llmload uses
(``POST /api/dashboards/db``, ``POST /api/annotations``, ``PATCH /api/annotations/:id``),
checks each request against Grafana's documented HTTP API (method, path, auth
header, JSON body shape) and records it.  What is *not* covered: Grafana's own
handling of the payloads (rendering, dashboard migration, annotation storage).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dashboards import build as builder
from dashboards.annotations import GrafanaAnnotations
from dashboards.llm_load import PHASE_TAG, UID
from loadtests.sinks import RecordSink

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "glsa_standin_token_0123456789"


class GrafanaStandIn(ThreadingHTTPServer):
    """Records requests; answers like Grafana when they match its HTTP API, 4xx when not."""

    daemon_threads = True

    def __init__(self, prefix: str = "", status: int = 200) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.prefix = prefix
        self.status = status
        self.requests: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.auth = {f"Bearer {TOKEN}", "Basic " + base64.b64encode(b"admin:pw").decode()}
        self.next_id = 41

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{self.prefix}"


def _shape_errors(method: str, path: str, body: Any) -> list[str]:
    """Differences from Grafana's documented request bodies."""
    if not isinstance(body, dict):
        return ["body is not a JSON object"]
    if (method, path) == ("POST", "/api/dashboards/db"):
        d = body.get("dashboard", {})
        errs = [] if isinstance(d.get("panels"), list) and d.get("uid") else ["dashboard lacks"]
        if d.get("id") is not None:
            errs.append("dashboard.id must be null to create-or-overwrite by uid")
        if not isinstance(body.get("overwrite"), bool):
            errs.append("overwrite must be a boolean")
        return errs
    errs = []
    for key, kind in (("time", int), ("timeEnd", int), ("tags", list), ("text", str)):
        if key in body and body[key] is not None and not isinstance(body[key], kind):
            errs.append(f"{key} must be {kind.__name__}")
    if method == "POST" and not isinstance(body.get("time"), int):
        errs.append("time (epoch ms) is required")
    if not all(isinstance(t, str) for t in body.get("tags") or []):
        errs.append("tags must be strings")
    return errs


class _Handler(BaseHTTPRequestHandler):
    server: GrafanaStandIn

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _reply(self, status: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        srv = self.server
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?")[0].removeprefix(srv.prefix)
        body = json.loads(raw) if raw else None
        srv.requests.append(
            {"method": self.command, "path": path, "headers": dict(self.headers), "body": body}
        )
        if self.headers.get("Authorization") not in srv.auth:
            self._reply(401, {"message": "Unauthorized"})
            return
        known = self.command == "POST" and path in ("/api/dashboards/db", "/api/annotations")
        patch = self.command == "PATCH" and path.startswith("/api/annotations/")
        if not (known or patch):
            srv.errors.append(f"unexpected {self.command} {path}")
            self._reply(404, {"message": "Not found"})
            return
        if self.headers.get("Content-Type", "").split(";")[0] != "application/json":
            srv.errors.append(f"{path}: Content-Type {self.headers.get('Content-Type')}")
        errs = _shape_errors(self.command, path, body)
        if errs:
            srv.errors += errs
            self._reply(400, {"message": "; ".join(errs)})
            return
        if srv.status != 200:
            self._reply(srv.status, {"message": "internal error"})
        elif path == "/api/dashboards/db":
            uid = body["dashboard"]["uid"]
            self._reply(200, {"id": 7, "uid": uid, "url": f"/d/{uid}/x", "status": "success",
                              "version": 3, "slug": "x"})  # fmt: skip
        elif patch:
            self._reply(200, {"message": "Annotation patched"})
        else:
            srv.next_id += 1
            self._reply(200, {"message": "Annotation added", "id": srv.next_id})

    do_POST = _handle
    do_PATCH = _handle
    do_GET = _handle
    do_PUT = _handle


@pytest.fixture
def grafana():
    servers: list[GrafanaStandIn] = []

    def start(prefix: str = "", status: int = 200) -> GrafanaStandIn:
        srv = GrafanaStandIn(prefix, status)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _push(url: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GRAFANA_")}
    return subprocess.run(
        [sys.executable, "-m", "dashboards", "push", "--grafana-url", url],
        cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_push_with_a_token_posts_every_dashboard(grafana) -> None:
    srv = grafana()
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


def test_push_with_user_and_password_and_a_path_prefix(grafana) -> None:
    srv = grafana(prefix="/grafana")
    done = _push(srv.url + "/", {"GRAFANA_USER": "admin", "GRAFANA_PASSWORD": "pw"})
    assert done.returncode == 0, done.stderr
    assert srv.requests[0]["headers"]["Authorization"].startswith("Basic ")
    assert srv.errors == []


def test_push_refused_or_without_credentials_fails_without_leaking(grafana) -> None:
    srv = grafana()
    done = _push(srv.url, {"GRAFANA_USER": "admin", "GRAFANA_PASSWORD": "wrong-secret"})
    assert done.returncode == 1
    assert "Unauthorized" in done.stderr and "wrong-secret" not in done.stdout + done.stderr
    done = _push(srv.url, {})
    assert done.returncode == 2 and "GRAFANA_TOKEN" in done.stderr


def test_phase_annotations_become_regions(grafana) -> None:
    srv = grafana()
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


def test_an_end_without_a_start_posts_a_point(grafana) -> None:
    srv = grafana()
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
    caplog.set_level(logging.WARNING, logger="dashboards.annotations")
    t = time.perf_counter()
    for event in ("start", "end", "start", "end"):
        sink.on_phase("stream", "stream", event, time.time())
    assert time.perf_counter() - t < 5
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "unreachable" in warnings[0].getMessage()
    assert TOKEN not in caplog.text
    assert sink.disabled and sink.posted == 0


def test_grafana_errors_warn_once(grafana, caplog) -> None:
    srv = grafana(status=500)
    sink = GrafanaAnnotations(srv.url, token=TOKEN)
    caplog.set_level(logging.WARNING, logger="dashboards.annotations")
    sink.on_phase("sync", "sync", "start", time.time())
    sink.on_phase("sync", "sync", "end", time.time())
    assert len(srv.requests) == 1 and sink.disabled
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
