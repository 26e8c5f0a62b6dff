"""One redaction (``loadtests.redact``): canaries through every writer that takes a credential.

Each canary is planted the way a user hands one over (URL userinfo, a secret
query parameter, an auth header, a JSON key), then every output built from it
is searched: ``run.json``'s options and command, ``summary.json``,
``summary.md``, ``report.html``, the Grafana URL in messages.  The end-to-end
version with real processes is ``tests/integration/test_security_secrets.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.dashboards.annotations import GrafanaAnnotations
from llmload.loadtests.options import RunOptions
from llmload.loadtests.redact import (
    REDACTED,
    redact_argv,
    redact_header,
    redact_text,
    redact_url,
    redact_value,
)
from llmload.reports.page.html import render_html
from llmload.reports.page.markdown import render_markdown
from llmload.reports.summary.make import build_summary
from llmload.reports.table.loader import load_run
from tests.fixtures.reports import make_records, write_run

USER = "usr-canary-1b2c"
PASSWORD = "pwd-canary-3d4e"
QUERY = "qry-canary-5f6a"
HEADER = "hdr-canary-7b8c"
CANARIES = (USER, PASSWORD, QUERY, HEADER)
TARGET = f"https://{USER}:{PASSWORD}@llm.example/v1?api_key={QUERY}&api-version=2"
GRAFANA = f"http://admin:{PASSWORD}@grafana.example:3000/g?token={QUERY}"


def leaks(text: str) -> list[str]:
    return [c for c in CANARIES if c in text]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://h:1/p?token=abc&x=1", f"http://h:1/p?token={REDACTED}&x=1"),
        (
            "https://u:p@h/v1?key=1&max_tokens=5",
            f"https://{REDACTED}@h/v1?key={REDACTED}&max_tokens=5",
        ),
        ("https://tok@h/", f"https://{REDACTED}@h/"),  # a user name alone can be the token
        ("http://h/?api-version=2", "http://h/?api-version=2"),
        ("", ""),
    ],
)
def test_urls(url: str, expected: str) -> None:
    assert redact_url(url) == expected


@pytest.mark.parametrize(
    ("header", "secret"),
    [
        ("Authorization: Bearer x", True),
        ("X-Api-Key: x", True),
        ("X-API-KEY-ID: x", True),
        ("Cookie: a=b", True),
        ("x-auth-token: x", True),
        ("X-Team: infra", False),
        ("X-Max-Tokens: 5", False),
    ],
)
def test_headers(header: str, secret: bool) -> None:
    assert (redact_header(header) == header.split(":")[0] + ":" + REDACTED) is secret


def test_text_argv_and_json() -> None:
    assert redact_text(f"curl -H 'Authorization: Bearer {HEADER}' {TARGET}").count(REDACTED) == 3
    argv = ["run", "--header", f"api-key: {HEADER}", f"--target={TARGET}", "--users", "3"]
    assert not leaks(" ".join(redact_argv(argv))) and redact_argv(argv)[-2:] == ["--users", "3"]
    doc = {"api_key": QUERY, "token_source": "usage", "max_tokens": 5, "urls": [TARGET]}
    out = redact_value(doc)
    assert not leaks(json.dumps(out))
    assert out["token_source"] == "usage" and out["max_tokens"] == 5


def test_canaries_through_every_output(tmp_path: Path) -> None:
    opts = RunOptions.of(
        target=TARGET,
        header=[f"Authorization: Bearer {HEADER}", "X-Team: infra"],
        grafana_url=GRAFANA,
        pushgateway=GRAFANA,
    ).validate()
    argv = ["llmload", "run", "--target", TARGET, "--header", f"X-Api-Key: {HEADER}"]
    # what loadtests.run.runner.run_info puts in run.json (importing the runner means locust)
    info = {"target": redact_url(opts.connection.target), "command": redact_argv(argv)}
    info["config"] = opts.config()
    assert not leaks(json.dumps(info)), "run.json"
    assert "X-Team: infra" in json.dumps(info) and "api-version=2" in info["target"]

    records = make_records("stream", "stream", 5, t_start=1_700_000_000.0)
    run_dir = write_run(tmp_path / "run", records, meta={**info, "raw_target": TARGET})
    run = load_run(run_dir)
    summary = build_summary(run)
    outputs = {
        "summary.json": json.dumps(summary.to_json()),
        "summary.md": render_markdown(summary),
        "report.html": render_html(run, summary),
    }
    assert {name: leaks(text) for name, text in outputs.items()} == dict.fromkeys(outputs, [])
    assert not leaks(GrafanaAnnotations(GRAFANA).url)
