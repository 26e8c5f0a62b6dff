"""The harness under target faults: every issued request is exactly one record of the right class.

Real processes only: ``python -m llmload.loadtests run`` (report included) against
``python -m llmload.target_server`` with its fault knobs, a target SIGKILLed mid-run
and restarted on the same port, and a real nginx answering 502 (upstream dead)
and 504 (upstream slower than ``proxy_read_timeout``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.faults import (
    RunResult,
    as_client_classes,
    free_port,
    kill_and_restart,
    nginx_read_timeout,
    nginx_upstream_errors,
    run_loadtests,
    server_statuses,
)
from bench.server_abuse import wait_until

FAULTS = (
    "--fail-rate",
    "0.15",
    "--disconnect-rate",
    "0.15",
    "--stall-rate",
    "0.15",
    "--malformed-rate",
    "0.15",
    "--stall-s",
    "3",
    "--seed",
    "11",
)


def assert_complete_run(run: RunResult) -> None:
    """The run finished, every record is unique and the report carries the error breakdown."""
    assert run.rc == 0, run.stderr[-3000:]
    assert run.run_json["status"] == "completed"
    assert run.run_json["records"] == len(run.records) > 0
    assert len({r["request_id"] for r in run.records}) == len(run.records)
    assert "records arrived" not in run.stderr  # the runner's issued-vs-recorded check
    for r in run.records:
        assert (r["status"] == "ok") == (r["error"] is None), r
    errors = Counter({k: v for k, v in run.classes.items() if k != "ok"})
    assert run.summary_errors() == errors
    assert sorted(run.report_error_classes()) == sorted(errors)


def test_synthetic_faults_each_get_their_class(start_server_proc, tmp_path: Path) -> None:
    server = start_server_proc("--ttft-ms", "20", "--itl-ms", "10", *FAULTS)
    run = run_loadtests(
        tmp_path / "faults",
        *("--target", server.url, "--users", "10", "--spawn-rate", "50", "--pacing", "0.2s"),
        *("--duration", "2s", "--max-tokens", "16", "--ignore-eos", "--modes", "sync,stream"),
        "--stall-timeout",
        "1s",
        metrics_port=free_port(),
    )
    assert_complete_run(run)
    # the live client metrics (exporter) counted the same, class by class
    assert run.exporter_counts() == Counter((r["mode"], r["status"]) for r in run.records)
    by_mode = {
        m: Counter(r["status"] for r in run.records if r["mode"] == m) for m in ("sync", "stream")
    }
    assert {"ok", "http_5xx", "disconnect", "stall", "protocol"} <= set(by_mode["stream"])
    assert {"ok", "http_5xx", "disconnect", "protocol"} <= set(by_mode["sync"]), by_mode

    # the server counted the same requests, fault by fault (a stalled client leaves: cancelled;
    # a sync request just waits the stall out)
    def counted_as(mode: str) -> Counter[str]:
        return as_client_classes(server_statuses(server.url, mode == "stream"), mode)

    wait_until(lambda: all(counted_as(m) == want for m, want in by_mode.items()), timeout=5)
    for mode, want in by_mode.items():
        assert counted_as(mode) == want, mode
    for r in run.records:
        if r["status"] == "http_5xx":
            assert r["http_status"] == 500 and "injected failure" in r["error"]
        elif r["status"] == "stall":
            assert r["error"] == "no bytes for 1s" and r["e2e_s"] is None and r["mode"] == "stream"
        elif r["status"] == "protocol":
            assert r["error"].startswith("unparseable")
        elif r["status"] == "ok":
            assert r["output_tokens"] == 16


def test_target_killed_mid_run_and_restarted(tmp_path: Path) -> None:
    users = 4
    got = kill_and_restart(
        tmp_path / "kill",
        ("--ttft-ms", "50", "--itl-ms", "50"),
        (
            "--spawn-rate",
            "50",
            "--pacing",
            "0.5s",
            "--duration",
            "9s",
            "--max-tokens",
            "30",
            "--ignore-eos",
            "--modes",
            "stream",
        ),
        users=users,
    )
    run = got.run
    assert_complete_run(run)
    before = [r for r in run.records if r["started_at"] < got.killed_at]
    after = [r for r in run.records if r["started_at"] >= got.killed_at]
    # what the first server had finished or was serving is exactly what was recorded before it died
    assert got.running_at_kill == users
    assert (
        Counter(r["status"] for r in before)
        == Counter({"ok": got.before_kill["ok"], "disconnect": users}) - Counter()
    )
    # while it was down: connection refused; once back, served (and counted) again.  A
    # request started in the instant between the kill signal and the process's end may
    # still have reached it: cut off, or refused
    dying = [r for r in after if r["started_at"] < got.dead_at]
    assert {r["status"] for r in dying} <= {"connect", "disconnect"}

    # a request is stamped before it connects, so on a busy machine one stamped just before
    # the restart may connect just after it: judge each by when its bytes had gone out
    # (``send_s``: t0 -> its last byte written, connection set-up included)
    def sent_by(r: dict) -> float:
        return float(r["started_at"]) + float(r.get("send_s") or 0.0)

    down = [r for r in after if got.dead_at <= r["started_at"] and sent_by(r) < got.restarted_at]
    assert down and all(r["status"] == "connect" for r in down), Counter(r["status"] for r in down)
    # a request that got through while the first server was dying (the kernel accepts a
    # connection before the process is gone) was cut off by it, not served by the second
    answered = [r for r in after if r["status"] != "connect"]
    cut_off = [r for r in answered if sent_by(r) <= got.restarted_at]
    assert all(r["status"] == "disconnect" and r["started_at"] < got.dead_at for r in cut_off)
    reached = [r for r in answered if sent_by(r) > got.restarted_at]
    assert sum(got.after_restart.values()) == len(reached) > 0
    assert {r["status"] for r in reached} <= {"ok", "http_5xx"}
    assert any(r["status"] == "ok" for r in reached)


def test_nginx_502_when_the_upstream_is_dead(nginx_proxy, tmp_path: Path) -> None:
    proxy = nginx_proxy(f"http://127.0.0.1:{free_port()}", buffering=False, gzip=False)
    run = run_loadtests(
        tmp_path / "502",
        *("--target", proxy.url, "--model", "m", "--users", "3", "--spawn-rate", "50"),
        *("--pacing", "0.3s", "--duration", "1.5s", "--max-tokens", "8"),
        *("--max-error-rate", "100%"),  # every request fails here: exit 0, not 3
    )
    assert_complete_run(run)
    assert {r["phase"] for r in run.records} == {"sync", "stream"}
    assert {(r["status"], r["http_status"]) for r in run.records} == {("http_5xx", 502)}
    # nginx logged one failed upstream attempt per request the harness recorded
    assert sum(nginx_upstream_errors(proxy).values()) == len(run.records), proxy.error_log()


def test_nginx_504_when_the_upstream_is_slow(
    start_server: Callable[..., Any], nginx_proxy, tmp_path: Path
) -> None:
    server = start_server(ttft_ms=2500, itl_ms=10)
    with nginx_read_timeout(1):
        proxy = nginx_proxy(server.url, buffering=False, gzip=False)
    run = run_loadtests(
        tmp_path / "504",
        *("--target", proxy.url, "--users", "3", "--spawn-rate", "50", "--pacing", "0.3s"),
        *("--duration", "1.5s", "--max-tokens", "8"),
        *("--max-error-rate", "100%"),  # every request fails here: exit 0, not 3
    )
    assert_complete_run(run)
    sync = [r for r in run.records if r["mode"] == "sync"]
    stream = [r for r in run.records if r["mode"] == "stream"]
    # sync: nginx answers 504 itself; stream: the headers went out, then nginx cuts the body
    assert sync and {(r["status"], r["http_status"]) for r in sync} == {("http_5xx", 504)}
    assert stream and {(r["status"], r["http_status"]) for r in stream} == {("disconnect", 200)}
    assert all(0.9 < r["e2e_s"] < 2.4 for r in sync)
    assert nginx_upstream_errors(proxy)["timed_out"] == len(run.records), proxy.error_log()
    # the server saw each of them and counted it once, as abandoned by its client
    wait_until(lambda: server.state.admission.running == 0, timeout=5)
    assert server.metric(
        "llmserve_requests_total",
        endpoint="/v1/chat/completions",
        stream="false",
        status="cancelled",
    ) == len(sync)
    assert server.metric(
        "llmserve_requests_total",
        endpoint="/v1/chat/completions",
        stream="true",
        status="cancelled",
    ) == len(stream)
    assert server.state.admission.running == 0 and server.engine.running() == 0
