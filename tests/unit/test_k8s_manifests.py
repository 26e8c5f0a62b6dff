"""compose/k8s: the distributed example is valid Kubernetes and its pieces agree.

Validated offline against the Kubernetes OpenAPI schema that ``kubernetes-validate``
ships (strict: an unknown field is an error), then read as llmload would run it: the
commands parse with llmload's own parser, workers reach the master through the
Service, and the master waits for as many workers as the Deployment runs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmload.loadtests.run.cli import parse

kv = pytest.importorskip("kubernetes_validate")

MANIFEST = Path(__file__).resolve().parents[2] / "compose" / "k8s" / "llmload-distributed.yaml"


def _docs() -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text()) if d}


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    return container


def _argv(container: dict[str, Any]) -> list[str]:
    """The container's command line with ``$(VAR)`` expanded from its own env, as kubelet does."""
    env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
    words = container["command"][1:] + container.get("args", [])
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], w) for w in words]


def test_every_document_is_valid_kubernetes() -> None:
    docs = list(yaml.safe_load_all(MANIFEST.read_text()))
    assert {d["kind"] for d in docs} == {"Service", "Job", "Deployment"}
    for doc in docs:
        kv.validate(doc, kv.latest_version(), strict=True)  # raises on any schema error


def test_the_pieces_agree() -> None:
    docs = _docs()
    service, job, workers = docs["Service"], docs["Job"], docs["Deployment"]
    master_pod = job["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= master_pod.items()
    master = parse(_argv(_container(job)))
    worker = parse(_argv(_container(workers)))
    assert master.command == "run" and worker.command == "worker"
    opts = master.options
    assert (
        opts is not None and opts.distributed.master and opts.distributed.master_host == "0.0.0.0"
    )
    assert opts.distributed.expect_workers == workers["spec"]["replicas"]
    (port,) = service["spec"]["ports"]
    assert worker.master_host == service["metadata"]["name"]
    assert worker.master_port == opts.distributed.master_port == port["port"] == port["targetPort"]
    # the workers read the API key from the same variable the master names
    env = {e["name"] for e in _container(workers).get("env", [])}
    assert opts.connection.api_key_env in env
    # one core per worker process, and no more users than the workers carry (docs/scale.md)
    limits = _container(workers)["resources"]["limits"]
    assert limits["cpu"] == "1"
    assert opts.load.users <= 1000 * workers["spec"]["replicas"]
