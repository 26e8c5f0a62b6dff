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
from urllib.parse import urlsplit

from llmload.loadtests import serverfamilies
from llmload.loadtests.redact import redact_url
from llmload.loadtests.run.context import ResolvedRun
from llmload.loadtests.run.scrape import ServerScraper


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def scraper(run: ResolvedRun) -> ServerScraper | None:
    """The started scraper the options ask for, or None (off, or nothing to scrape)."""
    o, target, out_dir = run.opts.output, run.target, run.out_dir
    if o.server_metrics == "off":
        return None
    url = target.base_url + "/metrics" if o.server_metrics == "auto" else o.server_metrics
    own = _origin(url) == _origin(target.base_url)
    names = [*serverfamilies.known_names(), *o.server_metrics_family]
    scrape = ServerScraper(
        url,
        out_dir,
        names,
        interval_s=o.server_metrics_interval,
        headers=target.headers if own else None,
        auth=target.auth if own else None,
        verify=target.ssl_context() if url.startswith("https") else True,
    )
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
