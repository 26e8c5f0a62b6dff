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
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from llmload.loadtests import serverfamilies
from llmload.loadtests.redact import redact_url
from llmload.loadtests.run.context import ResolvedRun
from llmload.loadtests.run.scrape import ServerScraper


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def endpoint(run: ResolvedRun) -> str | None:
    """The URL ``--server-metrics`` scrapes (None: off); ``llmload.gpumetrics`` looks there
    too for the GPU families a server may serve beside its own."""
    o = run.opts.output
    if o.server_metrics == "off":
        return None
    return run.target.base_url + "/metrics" if o.server_metrics == "auto" else o.server_metrics


def target_scraper(
    run: ResolvedRun, url: str, names: Iterable[str], **kwargs: Any
) -> ServerScraper:
    """A scraper of ``url`` with the target's headers and credentials only on its own
    origin (``verify`` as the target's for https)."""
    target = run.target
    own = _origin(url) == _origin(target.base_url)
    return ServerScraper(
        url,
        run.out_dir,
        names,
        interval_s=run.opts.output.server_metrics_interval,
        headers=target.headers if own else None,
        auth=target.auth if own else None,
        verify=target.ssl_context() if url.startswith("https") else True,
        **kwargs,
    )


def scraper(run: ResolvedRun) -> ServerScraper | None:
    """The started scraper the options ask for, or None (off, or nothing to scrape)."""
    o = run.opts.output
    url = endpoint(run)
    if url is None:
        return None
    scrape = target_scraper(run, url, [*serverfamilies.known_names(), *o.server_metrics_family])
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
        f"server metrics: {shown} every {o.server_metrics_interval:g} s ({what}) "
        f"-> {scrape.path.name}",
        file=sys.stderr,
        flush=True,
    )
    return scrape
