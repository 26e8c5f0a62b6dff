"""The exporter's HTTP side: /metrics on loopback, the final-scrape grace, gevent, Pushgateway."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import httpx
import pytest

from llmload.exporter import LiveMetrics
from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.run.sinks import HarnessHealth
from tests.fixtures.prometheus import Pushgateway, promtool

ROOT = Path(__file__).resolve().parents[2]
EP = "/v1/chat/completions"


def rec(n: int, status: str = "ok") -> RequestRecord:
    return RequestRecord(
        request_id=f"r{n}",
        phase="main",
        scenario="chat",
        mode="stream",
        endpoint=EP,
        started_at=1.7e9 + n,
        status=status,
        ttft_s=0.05 + n / 1000,
        e2e_s=0.5,
        tpot_s=0.01,
        itl_s=[0.01, 0.012],
        output_tokens=3,
    )


def feed(m: LiveMetrics, n: int, status: str = "ok") -> None:
    for i in range(n):
        m.on_request_start("stream", "chat", EP)
        m.on_record(rec(i, status))


@pytest.fixture
def live() -> LiveMetrics:
    m = LiveMetrics(grace_s=0.0)
    yield m
    m.stop(grace_s=0.0)


def test_serves_metrics_on_an_ephemeral_loopback_port(live: LiveMetrics) -> None:
    port = live.start()
    assert port > 0
    feed(live, 4)
    feed(live, 1, status="timeout")
    live.on_users(5)
    live.on_health("local", HarnessHealth(cpu_percent=33.0, loop_lag_s=0.002, inflight=0))
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    lab = f'endpoint="{EP}",mode="stream",scenario="chat"'
    assert f'llmload_requests_total{{{lab},status="ok"}} 4.0' in text
    assert f'llmload_requests_total{{{lab},status="timeout"}} 1.0' in text
    assert "llmload_active_users 5.0" in text
    assert "llmload_client_cpu_percent 33.0" in text
    # a scrape counts once the server has finished sending it, a moment after the client has it
    deadline = time.monotonic() + 5
    while live.scrapes < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert live.scrapes == 1


def test_serves_on_ipv6_loopback_when_asked() -> None:
    probe = socket.socket(socket.AF_INET6)
    try:
        probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    finally:
        probe.close()
    m = LiveMetrics(grace_s=0.0)
    port = m.start("::1", 0)
    try:
        assert httpx.get(f"http://[::1]:{port}/metrics", timeout=5).status_code == 200
    finally:
        m.stop()


def test_one_start_per_run() -> None:
    m = LiveMetrics(grace_s=0.0)
    m.start()
    with pytest.raises(RuntimeError):
        m.start()
    m.stop()
    with pytest.raises(RuntimeError):
        m.start()


def test_promtool_finds_nothing_to_lint_in_the_exposition(live: LiveMetrics) -> None:
    port = live.start()
    empty = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    feed(live, 3)
    full = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    for text in (empty, full):
        res = promtool("check", "metrics", stdin=text)
        assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), res


def test_stop_waits_until_every_scraper_looked_again_then_frees_the_port() -> None:
    m = LiveMetrics(grace_s=10.0)
    port = m.start()
    url = f"http://127.0.0.1:{port}/metrics"
    for agent in ("prometheus-a", "prometheus-b"):  # an HA pair scrapes during the run
        httpx.get(url, headers={"User-Agent": agent}, timeout=5)
    seen: dict[str, str] = {}

    def late_scraper(agent: str, after_s: float) -> None:
        time.sleep(after_s)
        seen[agent] = httpx.get(url, headers={"User-Agent": agent}, timeout=5).text

    threads = [
        threading.Thread(target=late_scraper, args=("prometheus-a", 0.3)),
        threading.Thread(target=late_scraper, args=("prometheus-b", 1.0)),
    ]
    for t in threads:
        t.start()
    feed(m, 7)  # the run's last records land just before stop()
    t0 = time.monotonic()
    m.stop()
    waited = time.monotonic() - t0
    for t in threads:
        t.join()
    assert 0.8 < waited < 6.0, waited  # until b's late scrape, well before the 10 s grace
    assert all('status="ok"} 7.0' in text for text in seen.values())
    with pytest.raises(httpx.TransportError):
        httpx.get(url, timeout=2)


def test_stop_gives_up_after_grace_and_skips_it_when_never_scraped() -> None:
    scraped = LiveMetrics(grace_s=0.8)
    port = scraped.start()
    httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    deadline = time.monotonic() + 5  # the scrape counts once the server has sent it all,
    while scraped.scrapes < 1 and time.monotonic() < deadline:  # which may be after the
        time.sleep(0.01)  # client has read the body: without this, stop() saw no scraper
    t0 = time.monotonic()
    scraped.stop()
    assert 0.7 < time.monotonic() - t0 < 4.0
    lonely = LiveMetrics(grace_s=30.0)
    lonely.start()
    t0 = time.monotonic()
    lonely.stop()
    assert time.monotonic() - t0 < 2.0  # nobody ever scraped: nobody to wait for


GEVENT_CHILD = textwrap.dedent(
    """
    from gevent import monkey; monkey.patch_all()
    import json, sys, time
    import gevent, httpx
    from llmload.exporter import LiveMetrics
    from llmload.loadtests.run.health import HealthSampler
    from llmload.loadtests.measure.record import RequestRecord

    m = LiveMetrics(grace_s=20.0)
    port = m.start()
    # before the sampler starts: reading a ~1,000-line body through httpx in this very
    # process is the test's own cost, not the exporter's, and must not count as lag
    own = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code
    health = HealthSampler(lambda s: m.on_health("local", s), interval_s=0.1, tick_s=0.01)
    health.start()
    done = False
    issued = 0

    def user(i):
        global issued
        while not done:
            m.on_request_start("stream", "chat", "/e")
            gevent.sleep(0.005)
            issued += 1
            m.on_record(RequestRecord(str(issued), "main", "chat", "stream", "/e", 0.0, "ok",
                                      ttft_s=0.01, e2e_s=0.02, itl_s=[0.001]))

    users = [gevent.spawn(user, i) for i in range(20)]
    print(json.dumps({"port": port}), flush=True)
    deadline = time.monotonic() + 20
    while m.scrapes < 2 and time.monotonic() < deadline:   # wait for the parent's scrape
        gevent.sleep(0.02)
    gevent.sleep(0.3)
    calm = m.registry.get_sample_value("llmload_event_loop_lag_seconds")
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:                          # hog the hub, no yield
        pass
    gevent.sleep(0.25)
    blocked = m.registry.get_sample_value("llmload_event_loop_lag_seconds")
    done = True
    gevent.joinall(users, timeout=5)
    health.stop()
    print(json.dumps({"stopping": True}), flush=True)
    t0 = time.monotonic()
    m.stop()
    total = m.registry.get_sample_value(
        "llmload_requests_total", {"mode": "stream", "scenario": "chat", "endpoint": "/e",
                                   "status": "ok"})
    print(json.dumps({"own": own, "calm": calm, "blocked": blocked, "issued": issued,
                      "total": total, "stop_s": time.monotonic() - t0,
                      "health_running": health.running}), flush=True)
    """
)


@pytest.mark.timeout(90)
def test_serves_and_samples_under_gevent_monkey_patching() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", GEVENT_CHILD],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = json.loads(proc.stdout.readline())["port"]
        url = f"http://127.0.0.1:{port}/metrics"
        mid = httpx.get(url, timeout=10).text  # answered while 20 greenlets run
        assert "llmload_requests_total" in mid
        assert json.loads(proc.stdout.readline()) == {"stopping": True}
        final = httpx.get(url, timeout=10).text  # the post-run scrape stop() waits for
        result = json.loads(proc.stdout.readline())
        assert proc.wait(timeout=20) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    assert result["own"] == 200
    assert result["total"] == result["issued"] > 0
    assert f'status="ok"}} {float(result["issued"])}' in final
    assert result["stop_s"] < 10  # returned on our scrape, not at the 20 s grace
    assert result["calm"] < 0.15
    assert result["blocked"] > 0.25, result  # the 0.3 s hog shows up as hub lag
    assert result["health_running"] is False


def test_pushes_final_state_to_a_real_pushgateway(tmp_path: Path) -> None:
    gw = Pushgateway(tmp_path / "pgw")
    try:
        m = LiveMetrics(pushgateway=gw.url, push_job="llmload-test", grace_s=0.0)
        m.start()
        feed(m, 6)
        feed(m, 2, status="http_5xx")
        m.stop()
        text = gw.metrics()
    finally:
        gw.stop()
    lines = [ln for ln in text.splitlines() if ln.startswith("llmload_requests_total{")]
    got = {("ok" if 'status="ok"' in ln else "err"): float(ln.rsplit(" ", 1)[1]) for ln in lines}
    assert got == {"ok": 6.0, "err": 2.0}
    assert all('job="llmload-test"' in ln for ln in lines)
    assert 'llmload_time_to_first_token_seconds_count{endpoint="' in text


def test_a_failed_push_is_reported_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    m = LiveMetrics(pushgateway="http://127.0.0.1:9", grace_s=0.0)
    feed(m, 1)
    assert m.push() is False
    m.stop()
    assert "push to http://127.0.0.1:9 failed" in caplog.text
