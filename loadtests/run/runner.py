"""Running a test: phases over a locust runner, records into the run directory.

``run(options, argv, sinks=..., report=...)`` is the run behind ``python -m
llmload.loadtests run`` (wired by ``llmload.run``): it checks the target is reachable
(one line and exit 2 otherwise, within ~5 s), builds the workload, its own
writer and status line plus the sinks the caller's factory gives, then runs
each phase — warm-up, then one per mode, all with the same shape, prompts and
seed — on a driver: ``LocalDriver`` (users in this process) or, with
``--workers``/``--master``, ``distributed.MasterDriver`` (locust workers).

A phase ends when its shape does; requests in flight then get ``--drain-timeout``
to finish, and those still running after it are cancelled — each one
``disconnect`` record, error ``cancelled by the client: run stopped``.  Ctrl-C
(or SIGTERM) stops the run at once: in-flight requests are cancelled and
recorded the same way, the files are written, the run's status is
``interrupted`` and the exit code 130.  A write of the run's own files that fails
(a disk that fills, ``loadtests.run.writer``) stops it the same way, with status
``failed`` and exit code 4; an ``--out`` that cannot be written is refused before
the target is asked (``loadtests.run.outdir``, exit 2).
"""

from __future__ import annotations

import csv
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import gevent
from locust.env import Environment

from llmload.common import gcpolicy
from llmload.loadtests import calibrate
from llmload.loadtests.options import RunOptions
from llmload.loadtests.redact import redact_argv, redact_url
from llmload.loadtests.run import limits, outdir
from llmload.loadtests.run.context import LoadContext, ResolvedRun, UsageError, prepare
from llmload.loadtests.run.distributed import MasterDriver
from llmload.loadtests.run.health import HealthSampler
from llmload.loadtests.run.hub import RecordHub
from llmload.loadtests.run.phaseloop import EXIT_INTERRUPTED, Driver, PhaseLoop, plan_phases
from llmload.loadtests.run.phases import Phase
from llmload.loadtests.run.sinks import RecordSink, WebTab
from llmload.loadtests.run.status import StatusLine, error_rate_breach
from llmload.loadtests.run.users import LLMUser
from llmload.loadtests.run.writer import RunWriter
from llmload.loadtests.workload.replay import TraceReplay

log = logging.getLogger("llmload.loadtests")
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: the run completed but more of its measured requests failed than ``--max-error-rate`` allows
EXIT_ERROR_RATE = 3
#: the load generator's own failure: its run files could not be written (disk full, I/O
#: error, a read-only remount); the target is not to blame, and the run is not complete
EXIT_OUTPUT = 4
#: seconds users with nothing in flight get to leave their task at a phase end
IDLE_STOP_S = 1.0
#: target hosts that are this host (its accept queue is this kernel's)
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0"})


def default_out(label: str) -> Path:
    """``runs/<UTC>-<label>/``."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("runs") / f"{stamp}-{label or 'run'}"


def run_info(run: ResolvedRun, argv: list[str]) -> dict:
    """The static part of ``run.json``."""
    opts = run.opts
    info = {
        "run_id": run.out_dir.name,
        "label": opts.output.label or "run",
        "target": redact_url(opts.connection.target),
        "model": run.model,
        "protocol": opts.connection.protocol,
        "command": redact_argv(argv),
        "config": opts.config(),
        "workload": run.ctx.workload.describe(),
    }
    if opts.connection.protocol == "openai-responses":
        # how later turns reached the server: a prefix cache sees the two differently
        info["responses_chain"] = opts.connection.responses_chain
    # what the gate's fingerprint compares: the server's build, this machine's speed
    if run.server is not None:
        info["server"] = run.server
    info["calibration"] = calibrate.quick()
    if run.baseline is not None:
        info["baseline_target"] = run.baseline
    return info


class LocalDriver:
    """Users in this process, on a locust ``LocalRunner``."""

    shards = 1

    def __init__(self, environment: Any, ctx: LoadContext) -> None:
        self.env = environment
        self.ctx = ctx
        self.runner = environment.create_local_runner()

    def begin(self, phase: Phase) -> None:
        self.ctx.begin_phase(phase)

    def set_users(self, users: int, spawn_rate: float) -> None:
        self.runner.start(users, spawn_rate)

    def user_count(self) -> int:
        return int(self.runner.user_count)

    def stop(self, force: bool) -> None:
        if not force:
            # Drain first: stopping the users holds the event loop (tens of ms at 1,000
            # users), and the first tokens of requests still in flight would wait behind
            # it — the phase's last requests measured the harness, not the target.
            self.ctx.stop_accepting()
            deadline = time.monotonic() + self.ctx.load.drain_timeout
            while self.ctx.inflight > 0 and time.monotonic() < deadline:
                gevent.sleep(0.02)
        # what is still in flight after the drain is cancelled now (one record each);
        # users between requests stop as soon as their task returns
        self.env.stop_timeout = 0 if force or self.ctx.inflight else IDLE_STOP_S
        self.runner.stop()

    def abort(self) -> None:
        self.env.stop_timeout = 0
        self.ctx.stop_accepting()
        self.runner.user_greenlets.kill(block=False)

    def finish(self, phase: Phase) -> int:
        return self.ctx.issued.get(phase.name, 0)

    def nothing_fits(self) -> bool:
        return self.ctx.fit is not None and self.ctx.fit.nothing_fits

    def close(self) -> None:
        self.runner.quit()


def _health(hub: RecordHub, ctx: LoadContext | None, source: str = "local") -> HealthSampler:
    """Start this process's harness-health sampler feeding the hub.

    A distributed master has no users (``ctx`` None) but does all the exporting,
    so it samples itself too, as ``source`` "master" beside its workers.
    """
    sampler = HealthSampler(
        lambda snap: hub.on_health(source, snap),
        inflight=(lambda: ctx.inflight) if ctx is not None else (lambda: 0),
    )
    sampler.start()
    return sampler


#: builds the sinks beyond the run's own writer and status line (exporter, annotations,
#: the target's own metrics), given the resolved run and ``run_info`` (run_id, label,
#: redacted target, model: what run.json starts with); ``llmload.run`` supplies it
SinkFactory = Callable[[ResolvedRun, dict[str, Any]], Sequence[RecordSink]]
#: builds the report of a finished run directory and returns its terminal text
ReportFn = Callable[[Path, str | None], str]


class PhasePlan(Protocol):
    """Phases chosen as the run goes (the capacity search, ``llmload.capacity.command``).

    The runner asks for the next phase only once the previous one's records are
    all in, and rewrites ``info()`` into ``run.json`` after every phase.
    """

    def __iter__(self) -> Iterator[Phase]: ...

    def info(self) -> dict[str, Any]: ...


def run(
    opts: RunOptions,
    argv: list[str],
    extra_info: dict[str, Any] | None = None,
    *,
    sinks: SinkFactory | None = None,
    report: ReportFn | None = None,
    phases: PhasePlan | None = None,
) -> int:
    """The whole run; returns the exit code.

    ``sinks`` and ``report`` come from the composition point (``llmload.run``):
    this module knows the record contract, not who consumes it.  ``phases``
    replaces the fixed warm-up + one phase per mode (``plan_phases``).
    """
    distributed = opts.distributed.enabled
    if not host_limits_allow(opts):
        return EXIT_USAGE
    label = opts.output.label or "run"
    out_dir = Path(opts.output.out) if opts.output.out else default_out(label)
    try:
        outdir.check(out_dir)  # before the first request: a sentence and exit 2, like an option
    except outdir.OutDirError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    hub = RecordHub()
    try:
        resolved = prepare(opts, out_dir, hub)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    target, model, ctx, baseline = resolved.target, resolved.model, resolved.ctx, resolved.baseline
    opts = resolved.opts  # a protocol without a stream runs its sync phase alone
    if (out_dir / "run.json").exists():
        print(f"warning: replacing the previous run in {out_dir}", file=sys.stderr, flush=True)
    info = {**run_info(resolved, argv), **(extra_info or {})}
    writer = RunWriter(out_dir, info, opts.output.records_compression)
    status = StatusLine()
    hub.add(writer)
    hub.add(status)
    extra = list(sinks(resolved, info)) if sinks is not None else []
    for sink in extra:
        hub.add(sink)
    env = Environment(user_classes=[LLMUser], host=target.base_url)
    # locust waits this long for users in a task to finish at a stop, then kills them (a
    # cancelled request is one record); a master sends it to its workers with each start
    env.stop_timeout = opts.load.drain_timeout
    loop = PhaseLoop(opts, hub, status)
    timed = ctx.workload.count if isinstance(ctx.workload, TraceReplay) else None
    plan = plan_phases(opts.load, timed, baseline is not None)
    writer.on_failure = lambda failure: loop.stop_for(failure.sentence())
    if writer.failure is not None:  # run.json's first write already failed: send nothing
        loop.stop_for(writer.failure.sentence())
    loop.after_phase.append(lambda phase: save_locust_stats(env, out_dir, phase))
    loop.install_signals()
    driver: Driver
    master: MasterDriver | None = None
    sampler = None
    outcome = "failed"
    print(f"llmload: {target.base_url} model {model} -> {out_dir}", file=sys.stderr, flush=True)
    gcpolicy.settle()  # start-up is done: keep the collector out of the records' timings
    try:
        if distributed:
            driver = master = MasterDriver(env, resolved, hub, loop)
            sampler = _health(hub, None, "master")
        else:
            ctx.watch(env)
            driver = LocalDriver(env, ctx)
            sampler = _health(hub, ctx)
        if opts.output.web:
            # locust's web UI re-parses sys.argv with its own parser (on every page view):
            # our flags are parsed already, and would make it exit
            del sys.argv[1:]
            web_ui = env.create_web_ui(opts.output.web_host, opts.output.web_port)
            for sink in extra:
                if isinstance(sink, WebTab):
                    sink.attach(web_ui)
            print(f"web UI: http://{opts.output.web_host}:{opts.output.web_port}", file=sys.stderr)
        try:
            previous: Phase | None = None
            if note := outdir.space_note(out_dir, opts, plan):
                print(f"warning: {note}", file=sys.stderr, flush=True)
            for phase in phases if phases is not None else plan:
                cooldown = (
                    opts.load.cooldown if previous is not None and not previous.warmup else 0.0
                )
                loop.run_phase(driver, phase, cooldown)
                previous = phase
                if phases is not None:
                    writer.update(**phases.info())
                if loop.interrupted or worker_lost(driver, writer):
                    break
            outcome = "interrupted" if loop.interrupted else "completed"
            if loop.stopped_by is not None:
                outcome = "failed"
            if getattr(driver, "lost_workers", None):
                outcome = "failed"
        finally:
            driver.close()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
    except Exception:
        if loop.stopped_by is not None:
            outcome = "failed"
        elif loop.interrupted:
            outcome = "interrupted"
        else:
            log.exception("run failed")
    finally:
        if sampler is not None:
            sampler.stop()
        if phases is not None:
            writer.update(**phases.info())
        if ctx.fit is not None and master is not None:  # the users, so the counts, are on workers
            master.add_fit_counts(ctx.fit)
        if master is not None:
            report_master(master, writer)
        if ctx.fit is not None:
            writer.update(context_fit=ctx.fit.describe())
            if line := ctx.fit.summary_line():
                print(f"note: {line}", file=sys.stderr, flush=True)
            if ctx.fit.checked and ctx.fit.skipped == ctx.fit.checked and outcome == "completed":
                print(
                    f"error: no prompt fits the target's context length ({ctx.fit.limit} "
                    "tokens): nothing was sent",
                    file=sys.stderr,
                    flush=True,
                )
                outcome = "failed"
        writer.set_status(outcome)
        hub.close()
    print(f"run directory: {out_dir} ({writer.records} records, {outcome})", flush=True)
    if writer.failure is not None:
        print(f"error: {writer.failure.sentence()} (exit {EXIT_OUTPUT})", file=sys.stderr)
    if writer.run_json_error is not None:
        print(f"error: run.json could not be written: {writer.run_json_error}", file=sys.stderr)
    if report is not None and opts.output.report and writer.records:
        finish_report(out_dir, opts.output.slo, status, report, writer)
    else:
        print(status_summary(status, writer), flush=True)
    if writer.failure is not None:
        return EXIT_OUTPUT
    if outcome == "completed":
        breach = error_rate_breach(status.phases, opts.output.max_error_rate)
        if breach:
            print(f"error: {breach} (exit {EXIT_ERROR_RATE})", file=sys.stderr, flush=True)
            return EXIT_ERROR_RATE
        return EXIT_OK
    return EXIT_INTERRUPTED if outcome == "interrupted" else EXIT_FAILED


def host_limits_allow(opts: RunOptions) -> bool:
    """Check this host's limits for the run's users (``loadtests.run.limits``): notes on
    stderr; False (after one line per problem) when the run would hit a wall of errors.

    Local users, or ``--workers N`` local worker processes, are checked here; remote
    workers (``--master``) check their own share when they set up."""
    dist = opts.distributed
    if dist.master:
        return True
    host = urlsplit(opts.connection.target).hostname or ""
    found = limits.check(
        opts.load.users, max(dist.workers, 1), opts.load.spawn_rate, host in LOOPBACK
    )
    for note in found.notes:
        print(f"note: {note}", file=sys.stderr, flush=True)
    for error in found.errors:
        print(f"error: {error}", file=sys.stderr, flush=True)
    return not found.errors


def report_master(master: MasterDriver, writer: RunWriter) -> None:
    """``run.json``'s ``master``: how far behind on records the master got, how long it
    held the workers (``loadtests.run.masterqueue``); a warning when it held them."""
    stats = master.queue.stats()
    writer.update(master=stats)
    if stats["workers_held_s"] > 0:
        print(
            f"warning: the master fell behind on records ({stats['peak_waiting_records']} "
            f"waiting at most): workers held new requests for {stats['workers_held_s']:.1f} s, "
            "so less load was applied than asked for",
            file=sys.stderr,
            flush=True,
        )


def worker_lost(driver: Driver, writer: RunWriter) -> bool:
    """A distributed run lost a worker: say so in run.json and on stderr; the run stops.

    The phases still to come would run with less load than planned, so none runs.
    """
    lost = list(getattr(driver, "lost_workers", ()))
    if not lost:
        return False
    writer.update(lost_workers=lost)
    for w in lost:
        print(
            f"error: {w['worker']} was lost in phase {w['phase']} ({w['reason']}): "
            f"{w['lost_requests']} requests recorded as lost; the run stops here",
            file=sys.stderr,
            flush=True,
        )
    return True


def save_locust_stats(environment: Any, out_dir: Path, phase: Phase) -> None:
    """locust's own per-entry statistics of a phase as ``locust_<phase>.csv`` (cleared per phase).

    In a distributed run these are the master's aggregate of the workers'
    periodic stats reports, which may lag the records by a few seconds.
    """
    from locust.stats import PERCENTILES_TO_REPORT, StatsCSV

    try:
        with (out_dir / f"locust_{phase.name}.csv").open("w", newline="", encoding="utf-8") as f:
            StatsCSV(environment, PERCENTILES_TO_REPORT).requests_csv(csv.writer(f))
    except OSError as exc:
        log.warning("could not write locust stats for phase %s: %s", phase.name, exc)


def status_summary(status: StatusLine, writer: RunWriter) -> str:
    """The status line's end-of-run table, saying so when it counts requests the file lacks."""
    text = status.summary()
    counted = sum(p.requests for p in status.phases)
    if writer.failure is not None and counted != writer.records:
        text = (
            f"note: the table below counts the {counted} requests the run measured; "
            f"requests.jsonl holds {writer.records} of them (what reports read)\n{text}"
        )
    return text


def finish_report(
    out_dir: Path, slo: str | None, status: StatusLine, report: ReportFn, writer: RunWriter
) -> None:
    """Build and print the report (read from the records file: one truth); never fail the run
    over it."""
    try:
        print(report(out_dir, slo), flush=True)
    except OSError as exc:  # no room for the report's files either
        print(
            f"error: the report could not be written ({exc.strerror or exc}); "
            f"`llmload report build {out_dir}` reads the {writer.records} records there later",
            file=sys.stderr,
            flush=True,
        )
        print(status_summary(status, writer), flush=True)
    except Exception as exc:  # the report is a bonus: the run's files are already written
        log.error("report for %s failed: %s: %s", out_dir, type(exc).__name__, exc)
        print(status_summary(status, writer), flush=True)
