"""The compose stack ships no default credentials and publishes nothing beyond the host.

Reads ``compose/`` as Docker would see it (no Docker engine can run here):
every published port is bound to 127.0.0.1, every credential-looking variable
is required from the environment (``${VAR:?...}``) rather than defaulted, and
Grafana allows neither anonymous access nor sign-up.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose" / "docker-compose.yml"
SECRET_NAME = re.compile(r"(?i)(password|passwd|token|secret|api_?key|credential)")
#: ``${VAR:?msg}`` / ``${VAR?msg}``: compose refuses to start when VAR is unset
REQUIRED = re.compile(r"^\$\{(\w+):?\?[^}]*\}$")


def services() -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return dict(doc["services"])


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): str(v) for k, v in env.items()}


def test_published_ports_are_bound_to_loopback() -> None:
    published = {}
    for name, svc in services().items():
        assert svc.get("network_mode") != "host", name
        for port in svc.get("ports") or []:
            spec = (
                port if isinstance(port, str) else f"{port.get('host_ip', '')}:{port['published']}"
            )
            assert spec.startswith("127.0.0.1:"), f"{name} publishes {spec} beyond the host"
            published[name] = spec
    # Prometheus, Grafana, the exporter (locust master) and the proxy are published, on loopback
    assert {"prometheus", "grafana", "locust-master", "proxy"} <= set(published), published
    assert "9646" in published["locust-master"] and "9090" in published["prometheus"]
    # the target and the workers are reachable only inside the compose network
    assert "ports" not in services()["target"] and "ports" not in services()["locust-worker"]


def test_no_default_credentials() -> None:
    seen = []
    for name, svc in services().items():
        for var, value in environment(svc).items():
            if not SECRET_NAME.search(var):
                continue
            seen.append((name, var))
            assert REQUIRED.match(value), f"{name}: {var}={value!r} is not required from the env"
    assert ("grafana", "GF_SECURITY_ADMIN_PASSWORD") in seen
    grafana = environment(services()["grafana"])
    assert grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert grafana["GF_USERS_ALLOW_SIGN_UP"] == "false"
    # nothing shipped next to the stack sets a credential either
    for path in (ROOT / "compose").rglob("*"):
        if path.is_file() and path.suffix in (".yml", ".yaml", ".env", ".template", ""):
            text = path.read_text(encoding="utf-8", errors="replace")
            for line in text.splitlines():
                m = re.search(r"(?i)\b(\w*(password|token|secret)\w*)\s*[:=]\s*(\S+)", line)
                if m and not line.lstrip().startswith("#"):
                    if m.group(1) == "secretKeyRef":  # Kubernetes: a reference to a Secret
                        assert re.search(r"secretKeyRef: \{name: [\w-]+, key: [\w-]+", line), line
                        continue
                    assert m.group(3).startswith("${"), f"{path.name}: {line.strip()}"
            # a Kubernetes manifest may reference a Secret, never carry one
            assert not re.search(r"(?m)^\s*kind:\s*Secret\b", text), path.name
    assert not (ROOT / "compose" / ".env").exists()
