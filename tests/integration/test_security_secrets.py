"""Planted secrets never come out: not in run files, reports, logs, stdout/stderr or tracebacks.

Distinctive canaries go in every way a user hands llmload a credential — the
server's ``--api-key``, ``--api-key-env``, a ``--header``, a secret query
parameter and ``user:pass@`` in a URL, ``GRAFANA_TOKEN`` — through full
``python -m llmload.loadtests run`` runs (debug logging on), ``python -m llmload.reports build``
and the server's own log; then every file written and every captured stream
is searched for each canary.  The Grafana side is the loopback stand-in
(no Grafana can run here).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.faults import RunResult, free_port, run_loadtests
from llmload.target_server.launch import wait_healthy
from tests.fixtures.grafana import STANDIN_TOKEN
from tests.fixtures.server_proc import ROOT

KEY = "sk-canary-K3y-9f1e2d"  # the server's API key, sent via --api-key-env
HEADER = "hdr-canary-7c4b1a"  # a custom auth header's value
QUERY = "qry-canary-5e8d0c"  # ?api_key=... in the target URL
USERINFO = "pwd-canary-2a6f3b"  # user:pass@ in a URL
BAD_GRAFANA = "glsa_canary_wrong_4d2e"  # a Grafana token that is refused
CANARIES = (KEY, HEADER, QUERY, USERINFO, STANDIN_TOKEN, BAD_GRAFANA)


def leaks(texts: dict[str, str]) -> list[str]:
    """``where: canary`` for every canary found in any of ``texts``."""
    return [f"{where}: {c}" for where, text in texts.items() for c in CANARIES if c in text]


def files_under(*dirs: Path) -> dict[str, str]:
    """Every file under ``dirs``, read as text."""
    out = {}
    for d in dirs:
        for path in sorted(d.rglob("*")):
            if path.is_file():
                out[str(path)] = path.read_bytes().decode("utf-8", errors="replace")
    return out


def streams(name: str, run: RunResult) -> dict[str, str]:
    return {f"{name} stdout": run.stdout, f"{name} stderr": run.stderr}


def test_planted_secrets_appear_nowhere(
    tmp_path: Path, grafana_standin: Callable[..., Any]
) -> None:
    log_path = tmp_path / "server.log"
    port = free_port()
    with log_path.open("w", encoding="utf-8") as log:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llmload.target_server",
                "--port",
                str(port),
                "--api-key",
                KEY,
                "--log-level",
                "debug",
                "--ttft-ms",
                "10",
                "--itl-ms",
                "5",
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    grafana = grafana_standin()
    common = (
        "--users",
        "2",
        "--spawn-rate",
        "50",
        "--pacing",
        "0.3s",
        "--duration",
        "1s",
        "--max-tokens",
        "8",
        "--modes",
        "stream",
        "--log-level",
        "debug",
    )
    try:
        wait_healthy(url, 60, alive=lambda: server.poll() is None)
        good = run_loadtests(
            tmp_path / "good",
            *("--target", f"{url}/v1?api_key={QUERY}", "--api-key-env", "LLM_KEY"),
            *("--header", f"X-Api-Key: {HEADER}", "--grafana-url", grafana.url),
            *("--metrics-port", "0", *common),
            env={"LLM_KEY": KEY, "GRAFANA_TOKEN": STANDIN_TOKEN},
        )
        host_port = url.split("://", 1)[1]
        refused = run_loadtests(
            tmp_path / "refused",
            *("--target", f"http://ops:{USERINFO}@{host_port}", "--header", f"Auth: {HEADER}"),
            *("--grafana-url", f"http://admin:{USERINFO}@{grafana.url.split('://', 1)[1]}"),
            *common,
            env={"GRAFANA_TOKEN": BAD_GRAFANA},
        )
        unreachable = run_loadtests(
            tmp_path / "unreachable",
            *("--target", f"http://ops:{USERINFO}@127.0.0.1:9/v1?token={QUERY}"),
            *("--api-key-env", "LLM_KEY", *common),
            env={"LLM_KEY": KEY},
        )
        # typos a user makes with a credential in hand: one line each, never the secret
        mistakes = [
            run_loadtests(tmp_path / f"mistake{i}", *args, "--duration", "1s")
            for i, args in enumerate(
                (
                    ("--target", url, "--header", f"Authorization Bearer {KEY}"),
                    ("--target", f"http://ops:{USERINFO}@127.0.0.1:port/v1?api_key={QUERY}"),
                    ("--target", f"https://ops:{USERINFO}@{host_port}", "--ca-bundle", "/nope.pem"),
                    ("--target", f"ftp://ops:{USERINFO}@{host_port}?token={QUERY}"),
                )
            )
        ]
    finally:
        server.terminate()
        server.wait(10)
    server_log = log_path.read_text(encoding="utf-8")

    # the secrets did their job: the key was accepted, the Grafana token used
    assert good.rc == 0 and good.records, good.stderr[-2000:]
    assert {r["status"] for r in good.records} == {"ok"}
    auth = {r["headers"].get("Authorization") for r in grafana.requests}
    assert f"Bearer {STANDIN_TOKEN}" in auth and f"Bearer {BAD_GRAFANA}" in auth
    # every request refused: the run exits 3 (--max-error-rate default), records kept
    assert refused.rc == 3 and {r["http_status"] for r in refused.records} == {401}
    assert unreachable.rc == 2 and "cannot reach target" in unreachable.stderr
    assert '"status": "ok"' in server_log and '"status": "unauthorized"' in server_log

    for run in mistakes:
        assert run.rc == 2 and "Traceback" not in run.stderr, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1 and not run.out.exists()

    built = subprocess.run(
        [sys.executable, "-m", "llmload.reports", "build", str(good.out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert built.returncode == 0, built.stderr
    assert (good.out / "report.html").exists() and (refused.out / "summary.md").exists()

    texts = files_under(tmp_path / "good", tmp_path / "refused", tmp_path / "unreachable")
    texts |= streams("good", good) | streams("refused", refused)
    texts |= streams("unreachable", unreachable)
    texts |= {"reports build stdout": built.stdout, "reports build stderr": built.stderr}
    for i, run in enumerate(mistakes):
        texts |= streams(f"mistake {i}", run)
    texts["server log"] = server_log
    # what went to Grafana: annotation bodies and paths (its own token rides in the header)
    texts["grafana bodies"] = repr([(r["path"], r["body"]) for r in grafana.requests])
    assert len(texts) >= 22
    assert not leaks(texts)
