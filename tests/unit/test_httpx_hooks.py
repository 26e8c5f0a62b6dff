"""The private httpx/httpcore hooks the httpx fallback path sets exist in the pinned releases.

``loadtests.transport.target`` gives httpx's transport our connector by replacing
``HTTPTransport._pool`` and keeps a ``SetCookieJar`` in ``Client._cookies``;
``loadtests.transport.connect`` subclasses ``httpcore._backends.sync.SyncStream``.
None of that is public API, so pyproject pins httpx and httpcore to the releases this
suite covers; this test fails first when a release moves a hook, or the pin drifts.
"""

from __future__ import annotations

import importlib.metadata as md
import tomllib
from pathlib import Path

import httpcore
import httpx
from packaging.requirements import Requirement

from llmload.loadtests.options import ConnectionOptions
from llmload.loadtests.transport.connect import CoalescingStream
from llmload.loadtests.transport.target import SetCookieJar, Target

ROOT = Path(__file__).resolve().parents[2]


def pins() -> dict[str, Requirement]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    reqs = [Requirement(d) for d in deps]
    return {r.name: r for r in reqs if r.name in ("httpx", "httpcore")}


def test_httpx_and_httpcore_are_pinned_below_the_next_minor_release() -> None:
    got = pins()
    assert set(got) == {"httpx", "httpcore"}
    for name, req in got.items():
        assert any(s.operator == "<" for s in req.specifier), f"{name} needs an upper bound"
        assert md.version(name) in req.specifier, f"{name} {md.version(name)} outside {req}"


def test_the_private_hooks_are_where_the_fallback_path_sets_them() -> None:
    from httpcore._backends.sync import SyncStream

    assert issubclass(CoalescingStream, SyncStream)
    transport = httpx.HTTPTransport()
    assert isinstance(transport._pool, httpcore.ConnectionPool)
    target = Target(
        ConnectionOptions(target="http://127.0.0.1:9", request_timeout=5, stall_timeout=5), {}
    )
    with target.httpx_client() as client:
        assert isinstance(client._cookies, SetCookieJar)
        assert isinstance(client._transport._pool, httpcore.ConnectionPool)  # type: ignore[attr-defined]  # an attribute the stubs do not declare
        assert client.cookies is not None  # the public property still reads our jar
