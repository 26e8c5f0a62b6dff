"""Connecting to a Grafana through ``grafana-client``; credentials come from the environment only.

``grafana-client`` is the maintained continuation of ``grafana-api`` (which has had
no release since 2020).  Credentials are never logged or written anywhere: errors
name the URL with any userinfo removed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from grafana_client import GrafanaApi

from llmload.loadtests.redact import redact_url

#: ``GRAFANA_TOKEN`` (a service-account token) wins over user/password.
TOKEN_ENV = "GRAFANA_TOKEN"
USER_ENV = "GRAFANA_USER"
PASSWORD_ENV = "GRAFANA_PASSWORD"

Credential = str | tuple[str, str] | None


def credential_from_env(env: Mapping[str, str] | None = None) -> Credential:
    """A token, a (user, password) pair, or None, read from the environment."""
    env = os.environ if env is None else env
    if env.get(TOKEN_ENV):
        return env[TOKEN_ENV]
    if env.get(USER_ENV) and env.get(PASSWORD_ENV):
        return (env[USER_ENV], env[PASSWORD_ENV])
    return None


def connect(
    url: str,
    token: str | None = None,
    user: str | None = None,
    password: str | None = None,
    timeout: float = 5.0,
) -> GrafanaApi:
    """A ``GrafanaApi`` for ``url`` (``http://host:3000`` or ``https://host/grafana``)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not a Grafana URL: {redact_url(url)!r} (expected http[s]://host[:port])")
    credential: Credential = token or ((user, password) if user and password else None)
    prefix = parts.path.strip("/")
    return GrafanaApi(
        auth=credential,
        host=parts.hostname,
        port=parts.port,
        url_path_prefix=f"{prefix}/" if prefix else "",
        protocol=parts.scheme,
        timeout=timeout,
    )


def connect_from_env(url: str, timeout: float = 5.0) -> GrafanaApi:
    """``connect`` with the credential from ``GRAFANA_TOKEN`` or ``GRAFANA_USER``/``_PASSWORD``."""
    credential = credential_from_env()
    if isinstance(credential, tuple):
        return connect(url, user=credential[0], password=credential[1], timeout=timeout)
    return connect(url, token=credential, timeout=timeout)
