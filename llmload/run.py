"""The one composition point: which sinks a run feeds, which report it builds, how it starts.

Every other module imports only downward (``docs/development.md`` draws the
layers); this is the one place that knows all of them:

* ``sinks``     — beyond the run's own writer and status line: the client-side
  exporter (``exporter.LiveMetrics``), Grafana phase annotations
  (``dashboards.annotations``) and the web UI's llmload tabs (``llmload.webui``),
  as the options ask; ``run_sinks`` adds the scraper of the target's own
  ``/metrics`` (``llmload.servermetrics``);
* ``report``    — ``reports.build_run`` + ``reports.render_terminal`` at the end;
* ``run``       — ``loadtests.run.runner.run`` with those two;
* ``loadtest``  — ``run``, starting the bundled server first when no target is given;
* ``main``      — ``python -m llmload.loadtests {run,loadtest,worker}`` (and ``llmload`` for those).

Importing it gevent-patches the process first (locust's world: the patch must
come before ``ssl`` and sockets are imported), so import it only where load runs.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from llmload import (
    bundled,
    gpumetrics,
    reports,
    servermetrics,
    speedcheck,
)
from llmload.dashboards.annotations import GrafanaAnnotations
from llmload.exporter import LiveMetrics
from llmload.loadtests.options import OutputOptions, RunOptions
from llmload.loadtests.run import cli, runner
from llmload.loadtests.run.context import ResolvedRun
from llmload.loadtests.run.distributed import worker_main
from llmload.loadtests.run.sinks import RecordSink
from llmload.webui import LiveTab

log = logging.getLogger("llmload.loadtests")


def sinks(opts: OutputOptions, info: dict[str, Any]) -> list[RecordSink]:
    """The exporter (started), Grafana annotation and web UI sinks the options ask for."""
    out: list[RecordSink] = []
    label = str(info.get("label") or "run")
    if opts.metrics_port is not None or opts.pushgateway:
        live = LiveMetrics(pushgateway=opts.pushgateway)
        live.describe_run(
            run=str(info.get("run_id", "")),
            label=label,
            model=str(info.get("model", "")),
            target=str(info.get("target", "")),
        )
        if opts.metrics_port is not None:
            try:
                port = live.start(opts.metrics_host, opts.metrics_port)
                print(f"metrics: http://{opts.metrics_host}:{port}/metrics", file=sys.stderr)
            except OSError as exc:
                log.warning("exporter: cannot serve on port %s: %s", opts.metrics_port, exc)
        out.append(live)
    if opts.grafana_url:
        token = os.environ.get("GRAFANA_TOKEN")
        out.append(GrafanaAnnotations(opts.grafana_url, token=token, run_label=label))
    if opts.web:
        out.append(LiveTab(opts.slo))  # the llmload tabs of locust's web UI
    return out


def run_sinks(run: ResolvedRun, info: dict[str, Any]) -> list[RecordSink]:
    """``sinks``, and the scrapers of the target's own metrics (``--server-metrics``) and of
    its GPUs (``--gpu-metrics``): the runner's ``SinkFactory``."""
    # the capacity search finds the server's by its file (gpu_metrics.jsonl is the other)
    scraping = servermetrics.Scraping.of(run)
    server = scraping.scraper()
    gpu = gpumetrics.scraper(run, scraping)
    out = sinks(run.opts.output, info)
    for sink in out:
        if gpu is not None and isinstance(sink, LiveMetrics):
            sink.watch_gpu(gpu)  # the GPUs' figures on llmload's own /metrics too
    return [*out, *(s for s in (server, gpu) if s is not None)]


def report(out_dir: Path, slo: str | None) -> str:
    """Write summary.json, summary.md and report.html; return the terminal summary."""
    return reports.render_terminal(reports.build_run(out_dir, slo))


def run(opts: RunOptions, argv: list[str], extra_info: dict[str, Any] | None = None) -> int:
    """``llmload run``: the run, wired to its sinks and report; the exit code."""
    return runner.run(opts, argv, extra_info, sinks=run_sinks, report=report)


#: what runs once the target is there: ``run``, or another plan (``llmload.capacity.command``)
RunFn = Callable[[RunOptions, list[str], dict[str, Any] | None], int]


def loadtest(
    opts: RunOptions,
    argv: list[str],
    engine: str = "",
    server_args: Sequence[str] = (),
    go: RunFn = run,
) -> int:
    """``go`` against ``opts.target``, or against a bundled server started for the run."""
    if opts.connection.target:
        return go(opts, argv, None)
    candidates = [engine] if engine else [bundled.DEFAULT_ENGINE, bundled.FALLBACK_ENGINE]
    server: bundled.BundledServer | None = None
    for name in candidates:
        print(f"starting the bundled server (engine {name}) ...", file=sys.stderr, flush=True)
        try:
            server = bundled.start_server(name, list(server_args))
            break
        except bundled.ServerFailed as exc:
            print(f"warning: {exc}", file=sys.stderr, flush=True)
    if server is None:
        print("error: the bundled server could not start", file=sys.stderr)
        return runner.EXIT_USAGE
    print(f"bundled server: {server.url} (engine {server.engine})", file=sys.stderr, flush=True)
    opts = opts.with_(target=server.url)
    try:
        info = {"engine": server.engine, **_speed_check(opts, server.url)}
        return go(opts, argv, {"bundled_server": info})
    finally:
        server.stop()


def _speed_check(opts: RunOptions, url: str) -> dict[str, Any]:
    """Measure the bundled engine's speed here and say whether the planned load fits it."""
    streams = min(opts.load.users, speedcheck.MAX_PROBE_STREAMS)
    try:
        speed = speedcheck.engine_speed(url, streams)
    except httpx.HTTPError as exc:
        print(f"warning: could not measure the bundled server's speed: {exc}", file=sys.stderr)
        return {}
    info, lines = speedcheck.verdict(opts, speed, streams)
    for line in lines:
        print(line, file=sys.stderr, flush=True)
    return info


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m llmload.loadtests {run,loadtest,worker}``; returns the exit code."""
    try:
        inv = cli.parse(argv)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return runner.EXIT_USAGE
    if inv.command == "worker":
        return worker_main(inv.master_host, inv.master_port)
    assert inv.options is not None
    if inv.command == "loadtest":
        return loadtest(inv.options, inv.argv, engine=inv.engine, server_args=inv.server_args)
    return run(inv.options, inv.argv)
