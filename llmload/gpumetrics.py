"""``--gpu-metrics``: which GPU exporter a run scrapes beside the server, and the line saying so.

``auto`` (the default) tries NVIDIA dcgm-exporter's default endpoint on the
target's host (``http://HOST:9400/metrics``), then the target's own metrics
endpoint (``--server-metrics``'s: the bundled server on CUDA serves its GPU's
NVML figures there under dcgm-exporter's names, ``target_server.nvmlgauges``),
taken only when a GPU family llmload knows is in it; it says nothing when
neither has one: most targets have no GPU figures beside them.  A URL is
scraped as given (NVIDIA dcgm-exporter or AMD's device metrics exporter) and one
line says what it found or why there is nothing; ``nvml`` reads this host's GPUs
through NVML (``llmload.common.nvml``: the target runs beside the load
generator); ``off`` scrapes nothing.  The target's headers and credentials never
go to an exporter: only to the target's own origin, as ``--server-metrics``
sends them.

The scraper is ``loadtests.run.scrape.ServerScraper`` again — a second
instance on the same clock, period (``--server-metrics-interval``) and phase
marks — writing ``gpu_metrics.jsonl`` with each family also kept per GPU.
"""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

from llmload import servermetrics
from llmload.common import nvml
from llmload.loadtests import gpufamilies
from llmload.loadtests.redact import redact_url
from llmload.loadtests.run.context import ResolvedRun
from llmload.loadtests.run.scrape import ServerScraper

FILE = "gpu_metrics.jsonl"


def auto_url(target_base_url: str) -> str:
    """dcgm-exporter's default endpoint on the target's host."""
    host = urlsplit(target_base_url).hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{gpufamilies.DCGM.port}/metrics"


def _scraper(scraping: servermetrics.Scraping, url: str) -> ServerScraper:
    return scraping.target_scraper(
        url,
        gpufamilies.known_names(),
        file=FILE,
        split=gpufamilies.ID_LABELS,
        what="GPU metrics",
    )


def _from_target(scraping: servermetrics.Scraping) -> ServerScraper | None:
    """``auto`` with no exporter at :9400: the target's own metrics endpoint, probed, when a
    GPU family llmload knows is in it (the bundled server on CUDA); else None, said nowhere."""
    url = scraping.endpoint
    if url is None:
        return None
    scrape = _scraper(scraping, url)
    if not scrape.probe() and scrape.samples and gpufamilies.detect(scrape.samples[-1][1].names()):
        return scrape
    scrape.client.close()
    return None


def scraper(run: ResolvedRun, scraping: servermetrics.Scraping) -> ServerScraper | None:
    """The started GPU scraper the options ask for, or None (off, or nothing answered);
    ``scraping``: the target's metrics scraping, where ``auto`` looks last."""
    o = run.opts.output
    if o.gpu_metrics == "off":
        return None
    auto = o.gpu_metrics == "auto"
    if o.gpu_metrics == "nvml":
        try:
            url = nvml.serve()
        except nvml.NvmlUnavailable as exc:
            print(f"GPU metrics: none (nvml: {exc})", file=sys.stderr, flush=True)
            return None
    elif auto:
        url = auto_url(run.target.base_url)
    else:
        url = o.gpu_metrics
    scrape = ServerScraper(
        url,
        run.out_dir,
        gpufamilies.known_names(),
        interval_s=o.server_metrics_interval,
        file=FILE,
        split=gpufamilies.ID_LABELS,
        what="GPU metrics",
    )
    why = scrape.probe()
    if why and auto:
        scrape.client.close()  # no exporter beside the target: the usual case, said nowhere
        found = _from_target(scraping)
        if found is None:
            return None
        scrape, why = found, ""
    shown = redact_url(scrape.url)
    scrape.start(absent=why)
    if why:
        print(f"GPU metrics: none ({shown}: {why})", file=sys.stderr, flush=True)
        return None
    sample = scrape.samples[-1][1] if scrape.samples else None
    exporter = gpufamilies.detect(sample.names()) if sample else None
    gpus = {k for per in (sample.per.values() if sample else ()) for k in per}
    what = f"{exporter.name}, {len(gpus)} GPU(s)" if exporter else "no GPU family llmload knows"
    print(
        f"GPU metrics: {shown} every {o.server_metrics_interval:g} s ({what}) -> {FILE}",
        file=sys.stderr,
        flush=True,
    )
    return scrape
