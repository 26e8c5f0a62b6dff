"""Distributed runs on locust's own master/worker mode.

The master (this process, ``--workers N`` or ``--master``) runs no users: once a
worker says its handlers are registered (``llmload_hello``), it sends the worker
the run's options once (``llmload_setup``; the API key is
not sent — every worker reads ``--api-key-env`` from its own environment),
announces each phase (``llmload_phase``) before starting the users, and owns
the one hub every record goes through.  A worker batches its records
(``llmload_batch``, every ``FLUSH_S`` or ``BATCH`` records), forwards its
health (``llmload_health``), and when locust stops its users it sends the rest
of the phase's records and then ``llmload_flushed`` with the number it issued.
Messages from one worker arrive in order, so once every worker has
acknowledged, the master holds all of the phase's records; the hub's
request-id de-duplication is the last line of defence against a batch
delivered twice.

No silent loss.  A request's *start* (its id, labels and start time) rides in
the batch too, but the batch is sent the moment a request starts, before the
request's own bytes leave (``LoadContext.announce``), so the master knows of
every request a worker has begun.  When a worker dies — locust declares it
missing after its heartbeats stop, or a worker process this master spawned
exits — each of its requests without a record becomes one with status
``lost`` (its worker and start time kept), the run stops after that phase and
says so (``lost_workers`` in ``run.json``, exit code 1).  So the records
always number at least the requests the target saw.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import STATE_MISSING

from llmload.common import gcpolicy
from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.options import RunOptions
from llmload.loadtests.run import limits
from llmload.loadtests.run.context import (
    LoadContext,
    ResolvedRun,
    UsageError,
    build_context,
    connect_target,
    facts_message,
    facts_of,
)
from llmload.loadtests.run.health import HealthSampler
from llmload.loadtests.run.hub import RecordHub
from llmload.loadtests.run.masterqueue import MasterQueue
from llmload.loadtests.run.phases import Phase, shard_share
from llmload.loadtests.run.sinks import HarnessHealth, NullSink
from llmload.loadtests.run.users import LLMUser
from llmload.loadtests.workload.fit import ContextFit

log = logging.getLogger(__name__)
FLUSH_S = 0.25
BATCH = 500
#: how often the master looks for workers that went missing or exited
WATCH_S = 0.5
#: seconds to wait for workers to connect, set up, or acknowledge a phase
WORKER_TIMEOUT_S = 90.0


class Forwarder(NullSink):
    """Worker side: batches records to the master, in order; a request start sends at once."""

    def __init__(self, runner: Any, worker: str) -> None:
        self.runner = runner
        self.worker = worker
        #: this worker's context fit (set once the context is built): its counts ride on health
        self.fit: ContextFit | None = None
        self._starts: list[dict[str, Any]] = []
        self._records: list[dict[str, Any]] = []
        self._loop = gevent.spawn(self._flush_loop)

    def announce(self, start: dict[str, Any]) -> None:
        """A request is about to be sent: the batch goes now, so the master knows its id first.

        (``on_request_start`` stays the no-op of ``NullSink``: the start travels here.)
        """
        self._starts.append(start)
        self.flush()

    def on_record(self, record: RequestRecord) -> None:
        self._records.append(record.to_dict())
        if len(self._records) >= BATCH:
            self.flush()

    def health(self, snap: HarnessHealth) -> None:
        """Send a health snapshot to the master (with the context-fit counts, when fitting)."""
        data = {"worker": self.worker, **asdict(snap)}
        if self.fit is not None:
            data["fit"] = self.fit.counts()
        self.runner.send_message("llmload_health", data)

    def flush(self) -> None:
        """Send whatever is buffered (no switch between taking and sending).

        A send that fails (ZeroMQ's queue to the master full past locust's retries)
        puts the batch back in front: it goes with the next flush, never lost."""
        if not self._starts and not self._records:
            return
        starts, records = self._starts, self._records
        self._starts, self._records = [], []
        try:
            self.runner.send_message(
                "llmload_batch", {"worker": self.worker, "starts": starts, "records": records}
            )
        except Exception:
            log.warning("worker %s: the batch to the master waits: send failed", self.worker)
            self._starts, self._records = starts + self._starts, records + self._records

    def _flush_loop(self) -> None:
        while True:
            gevent.sleep(FLUSH_S)
            self.flush()


class MasterDriver:
    """The master: spawns local workers if asked, sets them up, runs phases on them."""

    def __init__(self, environment: Any, run: ResolvedRun, hub: RecordHub, loop: Any) -> None:
        opts = run.opts
        self.env = environment
        self.opts = opts
        self.hub = hub
        self.loop = loop  # the phase loop (interrupted: stop the workers)
        dist = opts.distributed
        self.expect = dist.expected
        self.shards = self.expect
        bind_host = dist.master_host if dist.master else "127.0.0.1"
        port = dist.master_port if dist.master else 0
        self.runner = environment.create_master_runner(bind_host, port)
        self.port = self.runner.server.port
        #: workers whose handlers are registered (``llmload_hello``): only these get a setup
        self.hello: set[str] = set()
        self.ready: set[str] = set()
        self.failed: list[str] = []
        self.acks: dict[str, dict[str, int]] = {}
        self.names: dict[str, str] = {}  # locust client id -> our worker name
        #: per worker: its started requests without a record yet, by request id
        self.open: dict[str, dict[str, dict[str, Any]]] = {}
        self.started: dict[tuple[str, str], int] = {}  # (worker, phase) -> starts
        self.pids: dict[str, int] = {}  # worker name -> process id (from llmload_ready)
        #: per worker: its context-fit counts as of its last acknowledged phase
        self.fit_counts: dict[str, dict[str, int]] = {}
        #: workers lost mid-run: {"worker", "phase", "at", "lost_requests", "reason"}
        self.lost_workers: list[dict[str, Any]] = []
        self.phase: Phase | None = None
        self._closing = False
        #: batches and acknowledgements, handled in order off locust's receiving loop
        self.queue = MasterQueue(self._hold)
        for name, handler in (
            ("llmload_batch", self._queue_batch),
            ("llmload_health", self._on_health),
            ("llmload_hello", self._on_hello),
            ("llmload_ready", self._on_ready),
            ("llmload_failed", self._on_failed),
            ("llmload_flushed", self._queue_flushed),
        ):
            self.runner.register_message(name, handler)
        self.procs: list[subprocess.Popen[bytes]] = []
        for _ in range(dist.workers):
            cmd = [
                sys.executable,
                "-m",
                "llmload.loadtests",
                "worker",
                "--master-port",
                str(self.port),
            ]
            self.procs.append(subprocess.Popen(cmd, start_new_session=True))
        if dist.master:
            print(f"master: waiting for {self.expect} worker(s) on port {self.port}", flush=True)
        try:
            # a worker is connected (locust's ``client_ready``) before its own handlers are
            # registered: a setup sent then was dropped as an unknown message, and the run
            # timed out waiting for it.  Its ``llmload_hello`` says the handlers are there.
            self._wait(lambda: len(self.hello) >= self.expect, "workers to connect")
            # the run as the master resolved it: every worker sends to the same model with
            # the same facts (context length, adapter options, /tokenize), none rediscovers
            setup = {
                "options": opts.flat(),
                "model": run.model,
                "facts": facts_message(run.facts),
                "shards": self.expect,
            }
            for shard, client_id in enumerate(sorted(self.hello)[: self.expect]):
                self.names[client_id] = f"worker-{shard}"
                self.runner.send_message("llmload_setup", {**setup, "shard": shard}, client_id)
            self._wait(lambda: len(self.ready) >= self.expect or bool(self.failed), "worker setup")
            if self.failed:
                raise UsageError(f"worker failed: {self.failed[0]}")
        except BaseException:
            self.close()  # no worker process outlives a master that could not start
            raise
        self._watcher = gevent.spawn(self._watch)

    def _wait(self, done: Any, what: str, exits_fail: bool = True) -> None:
        deadline = time.monotonic() + WORKER_TIMEOUT_S
        handled = self.queue.handled
        while not done():
            if self.loop.interrupted:
                raise RuntimeError(f"interrupted while waiting for {what}")
            if self.queue.handled != handled:
                handled = self.queue.handled  # the master is working through the records
                deadline = time.monotonic() + WORKER_TIMEOUT_S
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {WORKER_TIMEOUT_S:g}s waiting for {what}")
            if exits_fail and any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"a worker process exited while waiting for {what}")
            gevent.sleep(0.05)

    # -- lost workers ------------------------------------------------------------

    def _watch(self) -> None:
        while not self._closing:
            gevent.sleep(WATCH_S)
            self.check_workers()

    def check_workers(self) -> None:
        """Declare lost each worker locust marks missing, or whose spawned process exited."""
        if self._closing:
            return
        clients = self.runner.clients
        for cid, name in self.names.items():
            client = clients.get(cid)
            if client is not None and client.state == STATE_MISSING:
                self._lose(name, "it stopped sending heartbeats")
        exited = {p.pid: p.returncode for p in self.procs if p.poll() is not None}
        for name, pid in self.pids.items():
            if pid in exited:
                self._lose(name, f"its process exited (code {exited[pid]})")

    def _lose(self, name: str, why: str) -> None:
        """Every request ``name`` started without a record becomes a ``lost`` record."""
        if any(w["worker"] == name for w in self.lost_workers):
            return
        self.queue.drain_now()  # what it did send still counts
        opened = self.open.pop(name, {})
        error = f"worker {name} was lost before reporting this request: {why}"
        for start in opened.values():
            self.hub.on_record(lost_record(start, name, error))
        phase = self.phase.name if self.phase is not None else None
        self.lost_workers.append(
            {
                "worker": name,
                "phase": phase,
                "at": time.time(),
                "lost_requests": len(opened),
                "reason": why,
            }
        )
        log.error(
            "worker %s lost in phase %s (%s): %d requests recorded as lost",
            name,
            phase,
            why,
            len(opened),
        )

    # -- messages from workers ---------------------------------------------------

    def _queue_batch(self, environment: Any, msg: Any) -> None:
        data = msg.data
        self.queue.put(self._on_batch, data, len(data["records"]) + len(data["starts"]))

    def _queue_flushed(self, environment: Any, msg: Any) -> None:
        self.queue.put(self._on_flushed, msg.data)  # after the worker's batches, as sent

    def _hold(self, hold: bool) -> None:
        self.runner.send_message("llmload_hold", {"hold": hold})

    def _on_batch(self, data: dict[str, Any]) -> None:
        worker = data["worker"]
        opened = self.open.setdefault(worker, {})
        for start in data["starts"]:
            opened[start["request_id"]] = start
            key = (worker, start["phase"])
            self.started[key] = self.started.get(key, 0) + 1
            self.hub.on_request_start(start["mode"], start["scenario"], start["endpoint"])
        for record in data["records"]:
            opened.pop(record.get("request_id"), None)
            self.hub.on_record(RequestRecord.from_dict(record))

    def _on_health(self, environment: Any, msg: Any) -> None:
        d = dict(msg.data)
        worker = d.pop("worker")
        fit = d.pop("fit", None)
        if fit is not None:
            self.fit_counts[worker] = fit
        self.hub.on_health(worker, HarnessHealth(**d))

    def _on_hello(self, environment: Any, msg: Any) -> None:
        self.hello.add(str(msg.data["client"]))

    def _on_ready(self, environment: Any, msg: Any) -> None:
        self.ready.add(msg.data["worker"])
        if msg.data.get("pid") and self.procs:  # a worker this master spawned
            self.pids[msg.data["worker"]] = int(msg.data["pid"])

    def _on_failed(self, environment: Any, msg: Any) -> None:
        self.failed.append(str(msg.data["error"]))

    def _on_flushed(self, data: dict[str, Any]) -> None:
        self.acks.setdefault(data["phase"], {})[data["worker"]] = data["issued"]
        if data.get("fit") is not None:
            self.fit_counts[data["worker"]] = data["fit"]

    def nothing_fits(self) -> bool:
        """Every worker that drew prompts found none that fits (their latest counts)."""
        if not self.fit_counts:
            return False
        total = ContextFit(0)
        for counts in self.fit_counts.values():
            total.add(counts)
        return total.nothing_fits

    def add_fit_counts(self, fit: ContextFit) -> None:
        """Add to the master's ``fit`` what the workers trimmed and skipped.

        The users, and so the prompts fitted to the context, are on the workers:
        each sends its counts so far with every phase's acknowledgement.
        """
        for counts in self.fit_counts.values():
            fit.add(counts)

    # -- Driver ------------------------------------------------------------------

    def begin(self, phase: Phase) -> None:
        self.check_workers()  # one lost since the last phase: run on, the run stops after it
        self._wait(
            lambda: len(self.runner.clients.ready) >= self.expect or bool(self.lost_workers),
            "workers to be ready",
        )
        self.acks[phase.name] = {}
        self.phase = phase
        self.runner.send_message("llmload_phase", asdict(phase))

    def set_users(self, users: int, spawn_rate: float) -> None:
        self.runner.start(users, spawn_rate)

    def user_count(self) -> int:
        return int(self.runner.user_count)

    def abort(self) -> None:
        # a worker already draining handles this only after its drain (locust's message loop)
        self.env.stop_timeout = 0
        self.runner.send_message("llmload_abort", {})

    def stop(self, force: bool) -> None:
        if force:
            self.abort()
        self.runner.stop()

    def _flushed(self, acks: dict[str, int]) -> bool:
        """Every worker still there has acknowledged (one that went missing never will).

        A worker's ack precedes its ``client_stopped``, so one that locust has
        already dropped from its clients after stopping has acknowledged.
        """
        clients = self.runner.clients
        lost = {w["worker"] for w in self.lost_workers}
        return all(
            name in acks or name in lost
            for cid, name in self.names.items()
            if cid in clients and clients[cid].state != STATE_MISSING
        )

    def finish(self, phase: Phase) -> int:
        acks = self.acks.setdefault(phase.name, {})
        try:
            self._wait(lambda: self._flushed(acks), f"workers to flush phase {phase.name}", False)
        except RuntimeError as exc:
            log.error("%s; records of phase %s may be missing", exc, phase.name)
        self.check_workers()
        # a lost worker never acknowledges: what it issued is what the master saw it start
        lost = {w["worker"] for w in self.lost_workers} - set(acks)
        return sum(acks.values()) + sum(self.started.get((w, phase.name), 0) for w in lost)

    def close(self) -> None:
        self._closing = True  # workers now exit on purpose
        self.queue.close()
        # locust sends quit to the workers in its table only; one caught between its
        # client_stopped and client_ready (right after the last phase's stop) is not in
        # it, and would live on until terminated below
        for cid in self.names:
            if cid not in self.runner.clients:
                self.runner.send_message("quit", None, cid)
        self.runner.quit()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


class WorkerState:
    """Worker side: builds the context on setup, follows phases, flushes on stop."""

    def __init__(self, environment: Any, runner: Any) -> None:
        self.env = environment
        self.runner = runner
        self.ctx: LoadContext | None = None
        self.forwarder: Forwarder | None = None
        self.sampler: HealthSampler | None = None
        self.name = "worker"
        runner.register_message("llmload_setup", self._on_setup)
        runner.register_message("llmload_phase", self._on_phase)
        runner.register_message("llmload_abort", self._on_abort)
        runner.register_message("llmload_hold", self._on_hold)
        environment.events.test_stop.add_listener(self._on_test_stop)

    def _on_setup(self, environment: Any, msg: Any) -> None:
        data = msg.data
        self.name = f"worker-{data['shard']}"
        try:
            opts = RunOptions.of(**data["options"]).validate()
            share = shard_share(opts.load.users, data["shard"], data["shards"]) or 0
            found = limits.check(share)  # this worker's users, on this host
            if found.errors:
                raise UsageError(f"{self.name}: {found.errors[0]}")
            target = connect_target(opts.connection)
            self.forwarder = Forwarder(self.runner, self.name)
            shard, shards = data["shard"], data["shards"]
            facts = facts_of(data["facts"])
            self.ctx = build_context(
                opts, target, data["model"], self.forwarder, self.name, shard, shards, facts=facts
            )
        except (UsageError, ValueError) as exc:
            self.runner.send_message("llmload_failed", {"worker": self.name, "error": str(exc)})
            return
        self.ctx.watch(environment)
        self.ctx.announce = self.forwarder.announce
        self.forwarder.fit = self.ctx.fit
        self._start_health()
        self.runner.send_message("llmload_ready", {"worker": self.name, "pid": os.getpid()})

    def _start_health(self) -> None:
        ctx, fwd = self.ctx, self.forwarder
        assert ctx is not None and fwd is not None
        self.sampler = HealthSampler(fwd.health, inflight=lambda: ctx.inflight)
        self.sampler.start()

    def _on_phase(self, environment: Any, msg: Any) -> None:
        if self.ctx is not None:
            self.ctx.begin_phase(Phase(**msg.data))

    def _on_hold(self, environment: Any, msg: Any) -> None:
        """The master is behind on records: start no request until it says go."""
        if self.ctx is not None:
            self.ctx.held = bool(msg.data["hold"])

    def _on_abort(self, environment: Any, msg: Any) -> None:
        environment.stop_timeout = 0
        if self.ctx is not None:
            self.ctx.stop_accepting()
        self.runner.user_greenlets.kill(block=False)

    def _on_test_stop(self, environment: Any, **_kw: Any) -> None:
        ctx, fwd = self.ctx, self.forwarder
        if ctx is None or fwd is None or ctx.phase is None:
            return
        fwd.flush()
        issued = ctx.issued.get(ctx.phase.name, 0)
        data = {"worker": self.name, "phase": ctx.phase.name, "issued": issued}
        if ctx.fit is not None:  # the run's counts so far of prompts trimmed or skipped here
            data["fit"] = ctx.fit.counts()
        self.runner.send_message("llmload_flushed", data)
        environment.stop_timeout = 0  # locust sleeps stop_timeout after stopping; nothing is left


def lost_record(start: dict[str, Any], worker: str, error: str) -> RequestRecord:
    """The record of a request whose worker died before reporting it."""
    return RequestRecord(
        request_id=start["request_id"],
        phase=start["phase"],
        scenario=start["scenario"],
        mode=start["mode"],
        endpoint=start["endpoint"],
        started_at=start["started_at"],
        status="lost",
        error=error,
        turn=start.get("turn", 0),
        worker=worker,
        user_id=start.get("user_id"),
        warmup=bool(start.get("warmup")),
        session_id=start.get("session_id"),
        step=start.get("step"),
        images=start.get("images", 0),
        inputs=start.get("inputs"),
    )


def worker_main(master_host: str, master_port: int) -> int:
    """``python -m llmload.loadtests worker``: serve a master until it quits."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the master handles Ctrl-C for the run
    env = Environment(user_classes=[LLMUser])
    runner = env.create_worker_runner(master_host, master_port)
    state = WorkerState(env, runner)
    runner.send_message("llmload_hello", {"client": runner.client_id})  # handlers registered
    gcpolicy.settle()  # start-up is done: keep the collector out of the records' timings
    runner.greenlet.join()
    if state.sampler is not None:
        state.sampler.stop()
    return 0
