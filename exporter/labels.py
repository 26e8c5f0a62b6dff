"""Bounded label values: user-derived names (scenarios, endpoints) may not grow the series count.

A dataset whose lines named 188 scenarios once produced 24,632 series in one
scrape.  ``CappedLabel`` lets the first ``limit`` distinct values through and
folds every later one into ``OTHER``, warning once; the run files keep every
name, so the report still tells them apart.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

#: the label value every value past a cap is counted under
OTHER = "other"


class CappedLabel:
    """The first ``limit`` distinct values of one label pass; later ones become ``OTHER``."""

    __slots__ = ("name", "limit", "_seen", "_warned")

    def __init__(self, name: str, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"{name}: the cap must be at least 1")
        self.name, self.limit = name, limit
        self._seen: set[str] = set()
        self._warned = False

    def value(self, raw: str) -> str:
        """``raw`` if it is one of the first ``limit`` values seen, else ``OTHER``."""
        if raw in self._seen:
            return raw
        if len(self._seen) < self.limit:
            self._seen.add(raw)
            return raw
        if not self._warned:
            self._warned = True
            log.warning(
                "exporter: more than %d %s values; %r and later ones are exported as "
                '%s="%s" (requests.jsonl keeps every name)',
                self.limit,
                self.name,
                raw,
                self.name,
                OTHER,
            )
        return OTHER


def target_host(url: str) -> str:
    """``host[:port]`` of a target URL: no scheme, path, query or credentials."""
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        host, port = parts.hostname or "", parts.port
    except ValueError:  # a port that is not a number
        return ""
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}" if port else host
