"""Defensive redaction of credentials in URLs and commands before anything is written."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

#: names whose value is a credential (``api_key``, ``token``, ``x-api-key``; not ``max_tokens``)
SECRET_NAME = re.compile(
    r"(?i)(^|[_-])(api[_-]?key|key|token|access[_-]?token|secret|password|passwd|"
    r"authorization|auth|sig|signature)$"
)
_INLINE = re.compile(
    r"(?i)((?:api[_-]?key|token|secret|password|authorization)[\s=:]+)"
    r"((?:bearer\s+)?[^\s&,;'\"]+)"
)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
REDACTED = "REDACTED"


def redact_url(url: str) -> str:
    """The URL with userinfo and secret-looking query parameters replaced."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, REDACTED if SECRET_NAME.search(k) else v) for k, v in pairs])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str) -> str:
    """Free text (a command line, a header) with URL userinfo and ``key=…`` values replaced."""
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    return _INLINE.sub(lambda m: f"{m.group(1)}{REDACTED}", text)


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
