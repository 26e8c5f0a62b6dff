"""The compose stack, checked with the real tools that run here.

Covered: the compose file against the compose-spec schema (``check-jsonschema``) and
its wiring (pinned images, loopback-only ports, mounts that exist, Grafana password
from the environment); ``promtool check config|rules`` and ``promtool test rules``;
``nginx -t`` on the rendered nginx template, and a real nginx with that config in front
of the bundled server passing SSE through unbuffered; ``make up``'s behaviour.

Not covered (no Docker engine on these machines): building the image, starting the
containers, the nginx image's envsubst step (replayed here by ``render_template``),
Grafana loading the provisioning files.  ``make up`` is run against a stub ``docker``
on PATH that stands in for the Docker CLI/engine.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.drive import drive
from tests.fixtures.prometheus import promtool

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose"
NGINX = os.environ.get("LLMLOAD_NGINX", "/usr/sbin/nginx")
TEMPLATE = COMPOSE / "nginx/llmload.conf.template"
#: http-level settings that buffer SSE (Debian's stock nginx.conf turns gzip on): the
#: template's own location settings must undo them.
HOSTILE = (
    "    gzip on;\n    gzip_proxied any;\n    gzip_min_length 1;\n"
    "    gzip_types text/event-stream application/json;\n    proxy_buffering on;\n"
)


def _compose() -> dict[str, Any]:
    return yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())


def render_template(text: str, env: dict[str, str]) -> str:
    """What the nginx image's envsubst step does: substitute only variables in ``env``."""
    return re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), m.group(0)), text)


def test_compose_file_passes_the_compose_spec_schema() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.compose-spec",
            str(COMPOSE / "docker-compose.yml"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_wiring() -> None:
    text = (COMPOSE / "docker-compose.yml").read_text()
    for var in re.findall(r"\$\{([^}]*)\}", text):  # every variable has a default or is required
        assert re.fullmatch(r"\w+:[-?].*", var), f"${{{var}}} has neither :- nor :?"
    services = _compose()["services"]
    assert set(services) >= {
        "target",
        "proxy",
        "prometheus",
        "grafana",
        "locust-master",
        "locust-worker",
        "target-external",
    }
    for name, svc in services.items():
        image = svc["image"]
        assert re.search(r":(v?\d+\.\d+\.\d+[\w.-]*|\$\{LLMLOAD_IMAGE_TAG:-local\})$", image), (
            f"{name}: image {image} is not pinned to a version"
        )
        for port in svc.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
        for volume in svc.get("volumes", []):
            host = volume.split(":")[0]
            if host.startswith("."):
                assert (COMPOSE / host).resolve().exists(), f"{name}: {host} does not exist"
    # the stack reaches each other by the names prometheus.yml scrapes
    assert "8000" in services["target"]["expose"]
    assert services["target-external"]["networks"]["default"]["aliases"] == ["target"]
    assert any(p.endswith(":9646") for p in services["locust-master"]["ports"])
    assert {"bundled"} == set(services["target"]["profiles"]) == set(services["proxy"]["profiles"])
    # Grafana: password only from the environment, no admin/admin
    grafana = services["grafana"]["environment"]
    assert grafana["GF_SECURITY_ADMIN_PASSWORD"].startswith("${GF_ADMIN_PASSWORD:?")
    home = grafana["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    mounts = dict(v.split(":")[:2] for v in services["grafana"]["volumes"] if v.startswith("."))
    assert (COMPOSE / "../dashboards/json").resolve() == (ROOT / "dashboards/json")
    assert home.startswith(mounts["../dashboards/json"] + "/")
    assert (ROOT / "dashboards/json" / Path(home).name).exists()
    provider = yaml.safe_load((COMPOSE / "grafana/provisioning/dashboards/llmload.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == mounts["../dashboards/json"]
    datasource = yaml.safe_load(
        (COMPOSE / "grafana/provisioning/datasources/prometheus.yml").read_text()
    )["datasources"][0]
    assert datasource["url"] == "http://prometheus:9090" and datasource["isDefault"] is True


def test_prometheus_config_loads_our_rules(tmp_path: Path) -> None:
    """prometheus.yml's rule_files glob, at the path compose mounts the rules, finds them."""
    mounts = dict(v.split(":")[:2] for v in _compose()["services"]["prometheus"]["volumes"])
    rules_dir = mounts["./prometheus/rules"]
    config = yaml.safe_load((COMPOSE / "prometheus/prometheus.yml").read_text())
    globs = config["rule_files"]
    assert any(g.startswith(rules_dir + "/") for g in globs), globs
    shutil.copytree(COMPOSE / "prometheus/rules", tmp_path / "rules")
    config["rule_files"] = [g.replace(rules_dir, str(tmp_path / "rules")) for g in globs]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    done = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "llmload.yml" in done.stdout and "SUCCESS: 4 rules found" in done.stdout


def test_promtool_checks_and_tests_the_alert_rules() -> None:
    rules = sorted((COMPOSE / "prometheus/rules").glob("*.yml"))
    done = promtool("check", "rules", *map(str, rules))
    assert done.returncode == 0, done.stdout + done.stderr
    tests = sorted((COMPOSE / "prometheus/tests").glob("*.yml"))
    assert tests
    done = promtool("test", "rules", *map(str, tests))
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = {
        r["alert"]
        for f in rules
        for g in yaml.safe_load(f.read_text())["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    assert alerts == {"LLMTTFTP95SLOBreach", "LLMErrorRateHigh", "LLMTargetDown"}
    tested = "".join(f.read_text() for f in tests)
    assert all(f"alertname: {a}" in tested for a in alerts)


def test_dockerfile_bakes_the_embedded_model() -> None:
    text = (COMPOSE / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11\.\d+-slim-\w+$", text, re.M)
    assert "torch==2.13.0" in text
    assert "embedded_model_dir" in text
    from llmload.target_server.model.embedded import embedded_model_dir  # the builder it calls

    assert callable(embedded_model_dir)
    copied = [w for line in re.findall(r"^COPY (.+) \S+$", text, re.M) for w in line.split()]
    for src in copied:
        assert (ROOT / src).exists(), src
    # the wheel's build inputs: every folder pyproject's package-dir maps, and setup.py
    with open(ROOT / "pyproject.toml", "rb") as f:
        folders = tomllib.load(f)["tool"]["setuptools"]["package-dir"].values()
    assert {"pyproject.toml", "setup.py", *folders} <= set(copied)


# --- nginx ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prefix(tmp: Path, upstream: str, port: int, extra: str = "") -> Path:
    """An nginx prefix dir whose nginx.conf includes the rendered template (as conf.d does)."""
    (tmp / "tmp").mkdir(parents=True, exist_ok=True)
    conf = render_template(
        TEMPLATE.read_text(),
        {
            "LLMLOAD_UPSTREAM": upstream,
            "LLMLOAD_LISTEN": f"127.0.0.1:{port}",
            "LLMLOAD_UPSTREAM_SCHEME": "http",
        },
    )
    assert "${" not in conf
    if extra:
        conf = conf.replace("proxy_buffering off;", f"proxy_buffering off;\n        {extra}")
    (tmp / "llmload.conf").write_text(conf)
    user = "user root;\n" if os.geteuid() == 0 else ""
    temp = "".join(
        f"    {k}_temp_path {tmp}/tmp/{k};\n"
        for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (tmp / "nginx.conf").write_text(
        f"{user}worker_processes 1;\npid {tmp}/nginx.pid;\nerror_log {tmp}/error.log warn;\n"
        f"events {{ worker_connections 256; }}\nhttp {{\n    access_log off;\n{temp}{HOSTILE}"
        f"    include {tmp}/llmload.conf;\n}}\n"
    )
    return tmp


@pytest.fixture
def nginx_binary() -> str:
    if not os.access(NGINX, os.X_OK):
        pytest.fail(f"{NGINX} missing: run `make system-deps` (installs nginx-light)")
    return NGINX


def test_nginx_accepts_the_config(nginx_binary: str, tmp_path: Path) -> None:
    prefix = _prefix(tmp_path, "127.0.0.1:9", _free_port())
    done = subprocess.run(
        [
            nginx_binary,
            "-t",
            "-e",
            str(prefix / "error.log"),
            "-p",
            str(prefix),
            "-c",
            str(prefix / "nginx.conf"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert "test is successful" in done.stderr
    directives = dict(
        line.strip().rstrip(";").split(None, 1)
        for line in TEMPLATE.read_text().splitlines()
        if line.strip().endswith(";") and not line.strip().startswith("#")
    )
    assert directives["proxy_buffering"] == "off" and directives["gzip"] == "off"
    assert directives["proxy_http_version"] == "1.1"
    assert int(directives["proxy_read_timeout"].rstrip("s")) >= 600


@pytest.fixture
def compose_nginx(nginx_binary: str, tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """Factory: run nginx with the compose config in front of ``upstream``; returns its URL."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(upstream: str) -> str:
        for attempt in range(3):
            port = _free_port()
            # the server sends X-Accel-Buffering: no; ignore it so the test checks our config
            prefix = _prefix(
                tmp_path / f"nginx{attempt}",
                upstream,
                port,
                extra="proxy_ignore_headers X-Accel-Buffering;",
            )
            proc = subprocess.Popen(
                [
                    nginx_binary,
                    "-e",
                    str(prefix / "error.log"),
                    "-p",
                    str(prefix),
                    "-c",
                    str(prefix / "nginx.conf"),
                    "-g",
                    "daemon off;",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs.append(proc)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    return f"http://127.0.0.1:{port}"
                except OSError:
                    time.sleep(0.02)
        raise RuntimeError((prefix / "error.log").read_text(errors="replace"))

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)


def test_nginx_passes_streams_through_unbuffered(start_server, compose_nginx) -> None:
    ttft_ms, itl_ms, tokens = 80, 25, 12
    server = start_server(ttft_ms=ttft_ms, itl_ms=itl_ms)
    proxy = compose_nginx(server.url.removeprefix("http://"))
    kw: dict[str, Any] = {"max_tokens": tokens, "model": server.engine.model_name}
    for url in (server.url, proxy):  # warm-up: first requests pay one-time client costs
        drive(url, "openai-chat", **kw)
    direct, proxied = [], []
    for _ in range(5):
        direct.append(drive(server.url, "openai-chat", **kw)[0])
        proxied.append(drive(proxy, "openai-chat", **kw)[0])
    assert all(r.status == "ok" and r.output_tokens == tokens for r in direct + proxied)
    d_ttft = statistics.median(r.ttft_s for r in direct)
    p_ttft = statistics.median(r.ttft_s for r in proxied)
    # nginx adds about a millisecond; a buffered stream would add the whole generation
    assert abs(p_ttft - d_ttft) < 0.020, (d_ttft, p_ttft)
    generation = (ttft_ms + (tokens - 1) * itl_ms) / 1000
    for r in proxied:  # buffered, the first token would come with the last, after `generation`
        assert r.ttft_s < generation / 2, (r.ttft_s, generation)
        assert len(r.itl_s) == tokens - 1
        assert sum(r.itl_s) >= 0.8 * (tokens - 1) * itl_ms / 1000  # events arrive spaced
    gaps = [r.ttft_s - r.server_ttft_s for r in proxied if r.server_ttft_s is not None]
    assert len(gaps) == len(proxied) and statistics.median(gaps) < 0.025, gaps


# --- make up / make down ---------------------------------------------------------------


def _stub_docker(tmp_path: Path, info_rc: int) -> dict[str, str]:
    """A ``docker`` on PATH that logs its argv and compose env (stands in for Docker)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "docker.log"
    stub = bin_dir / "docker"
    stub.write_text(
        "#!/bin/sh\n"
        f'echo "$* | $COMPOSE_PROFILES | $LLMLOAD_UPSTREAM | $LLMLOAD_TARGET" >> {log}\n'
        f'[ "$1" = info ] && exit {info_rc}\nexit 0\n'
    )
    stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("GF_ADMIN_PASSWORD", "MAKEFLAGS")}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return env


def _make(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_make_up_without_a_docker_engine_says_so(tmp_path: Path) -> None:
    env = _stub_docker(tmp_path, info_rc=1)
    env["GF_ADMIN_PASSWORD"] = "x"
    done = _make(env, "up")
    assert done.returncode != 0
    assert "no Docker engine reachable ('docker info' failed)" in done.stderr
    assert (tmp_path / "docker.log").read_text().count("\n") == 1  # only `docker info` ran


def test_make_up_profiles_and_external_target(tmp_path: Path) -> None:
    env = _stub_docker(tmp_path, info_rc=0)
    done = _make(env, "up")
    assert done.returncode != 0 and "set GF_ADMIN_PASSWORD" in done.stderr
    env["GF_ADMIN_PASSWORD"] = "x"
    assert _make(env, "up").returncode == 0
    assert _make(env, "up", "TARGET=http://localhost:8000/v1", "WORKERS=3").returncode == 0
    assert _make(env, "down").returncode == 0
    calls = [c for c in (tmp_path / "docker.log").read_text().splitlines() if "compose" in c]
    assert calls[0].startswith("compose -f compose/docker-compose.yml up -d --build | bundled")
    up, profiles, upstream, target = calls[1].split(" | ")
    assert up.endswith("--scale locust-worker=3") and profiles == "external,load"
    assert upstream == "host.docker.internal:8000"
    assert target == "http://host.docker.internal:8000/v1"
    assert calls[2].startswith("compose -f compose/docker-compose.yml down")
