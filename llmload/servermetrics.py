"""``--server-metrics``: which endpoint a run scrapes, and the one line that says so.

``auto`` (the default) is the target's own ``/metrics`` (its base URL, path
prefix kept, ``/v1`` dropped); a URL is scraped as given; ``off`` scrapes
nothing.  The target's headers and credentials go only to an endpoint on the
target's own origin — a metrics URL elsewhere never sees the API key.

The endpoint is probed once before the run (that scrape is the run's
baseline).  When it does not answer with Prometheus text the run goes on
exactly as without the option, and one line says why; ``server_metrics.jsonl``
then holds only that reason, for the report.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llmload.loadtests import serverfamilies
from llmload.loadtests.redact import redact_url
from llmload.loadtests.run.context import ResolvedRun
from llmload.loadtests.run.scrape import ServerScraper


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


@dataclass(frozen=True)
class Scraping:
    """The target's metrics scraping as a run's options set it, read once (``of``): the
    endpoint ``--server-metrics`` names, and scrapers that send the target's headers and
    credentials only to its own origin — ``scraper`` for the server's families,
    ``target_scraper`` for another reader of an endpoint (``llmload.gpumetrics`` looks for
    GPU families on the target's own ``/metrics``)."""

    endpoint: str | None
    families: tuple[str, ...]
    interval_s: float
    headers: dict[str, str] | None
    auth: Any
    base_url: str
    ssl_context: Callable[[], Any]
    out_dir: Path

    @classmethod
    def of(cls, run: ResolvedRun) -> Scraping:
        o, target = run.opts.output, run.target
        url = (
            None
            if o.server_metrics == "off"
            else target.base_url + "/metrics"
            if o.server_metrics == "auto"
            else o.server_metrics
        )
        return cls(
            url,
            (*serverfamilies.known_names(), *o.server_metrics_family),
            o.server_metrics_interval,
            target.headers,
            target.auth,
            target.base_url,
            target.ssl_context,
            run.out_dir,
        )

    def target_scraper(self, url: str, names: Iterable[str], **kwargs: Any) -> ServerScraper:
        """A scraper of ``url`` with the target's headers and credentials only on its own
        origin (``verify`` as the target's for https)."""
        own = _origin(url) == _origin(self.base_url)
        return ServerScraper(
            url,
            self.out_dir,
            names,
            interval_s=self.interval_s,
            headers=self.headers if own else None,
            auth=self.auth if own else None,
            verify=self.ssl_context() if url.startswith("https") else True,
            **kwargs,
        )

    def scraper(self) -> ServerScraper | None:
        """The started scraper of the server's families, or None (off, or nothing to
        scrape: one line says why)."""
        url = self.endpoint
        if url is None:
            return None
        scrape = self.target_scraper(url, self.families)
        why = scrape.probe()
        scrape.start(absent=why)
        shown = redact_url(url)
        if why:
            print(
                f"server metrics: none ({shown}: {why}); the report shows the client's side only",
                file=sys.stderr,
                flush=True,
            )
            return None
        server = serverfamilies.detect(scrape.samples[-1][1].names()) if scrape.samples else None
        what = f"{server.name}'s families" if server else "no family llmload knows"
        print(
            f"server metrics: {shown} every {self.interval_s:g} s ({what}) -> {scrape.path.name}",
            file=sys.stderr,
            flush=True,
        )
        return scrape
