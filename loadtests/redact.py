"""The one redaction: credentials out of URLs, headers, command lines and JSON, before writing.

One list of secret names (``SECRET_NAME``) and one placeholder (``REDACTED``)
for everything the harness writes or prints: ``run.json`` (options, command),
``summary.json`` and the reports (``reports``), Grafana URLs in messages
(``dashboards``), log lines.  A URL loses its whole ``user:pass@`` (a user name
can be a token) and the values of secret-named query parameters; a header
keeps its name; free text loses ``key=…``-style values and URL userinfo.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "REDACTED"
#: names whose value is a credential — query parameters, header names, JSON keys:
#: ``api_key``, ``X-Api-Key``, ``Authorization``, ``X-Auth-Token``, ``Cookie`` (not ``max_tokens``)
SECRET_NAME = re.compile(
    r"(?i)(^|[_-])(api[_-]?key|key|token|access[_-]?token|secret|password|passwd|pwd|"
    r"authorization|auth|cookie|credentials?|sig|signature)$"
)
_INLINE = re.compile(
    r"(?i)((?:api[_-]?key|token|secret|password|authorization)[\s=:]+)"
    r"((?:bearer\s+)?[^\s&,;'\"]+)"
)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")


def redact_url(url: str) -> str:
    """The URL with its userinfo and secret-named query values replaced."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, REDACTED if SECRET_NAME.search(k) else v) for k, v in pairs])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def secret_header(name: str) -> bool:
    """A header name with a secret word as any of its parts (``X-Api-Key-Id``, ``Cookie``)."""
    name = name.strip()
    return bool(SECRET_NAME.search(name)) or any(
        SECRET_NAME.fullmatch(part) for part in re.split(r"[_-]", name)
    )


def redact_header(header: str) -> str:
    """``Authorization: Bearer x`` -> ``Authorization:REDACTED`` (a secret-looking name)."""
    name, sep, value = header.partition(":")
    return f"{name}:{REDACTED}" if sep and value.strip() and secret_header(name) else header


def redact_text(text: str) -> str:
    """Free text (a command line, a log line) with URL userinfo and ``key=…`` values replaced."""
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    return _INLINE.sub(lambda m: f"{m.group(1)}{REDACTED}", text)


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with ``--header`` values and URL secrets redacted."""
    out: list[str] = []
    prev = ""
    for arg in argv:
        value = arg
        if prev == "--header":
            value = redact_header(arg)
        elif arg.startswith("--header="):
            value = "--header=" + redact_header(arg.split("=", 1)[1])
        elif "://" in arg and arg.startswith("--") and "=" in arg:
            flag, _, url = arg.partition("=")
            value = f"{flag}={redact_url(url)}"
        elif "://" in arg:
            value = redact_url(arg)
        out.append(value)
        prev = arg
    return out


def redact_value(value: Any) -> Any:
    """Recursively redact strings inside JSON-like data; secret-named keys lose their value."""
    if isinstance(value, str):
        return redact_url(value) if "://" in value else redact_text(value)
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            secretish = isinstance(k, str) and SECRET_NAME.search(k)
            out[k] = REDACTED if secretish and isinstance(v, str) and v else redact_value(v)
        return out
    return value
