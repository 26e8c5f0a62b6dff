"""Distributed runs on locust's own master/worker mode.

The master (this process, ``--workers N`` or ``--master``) runs no users: it
sends each worker the run's options once (``llmload_setup``; the API key is
not sent — every worker reads ``--api-key-env`` from its own environment),
announces each phase (``llmload_phase``) before starting the users, and owns
the one hub every record goes through.  A worker batches its request starts
and records (``llmload_batch``, every ``FLUSH_S`` or ``BATCH`` records),
forwards its health (``llmload_health``), and when locust stops its users it
sends the rest of the phase's records and then ``llmload_flushed`` with the
number it issued.  Messages from one worker arrive in order, so once every
worker has acknowledged, the master holds all of the phase's records; the
hub's request-id de-duplication is the last line of defence against a batch
delivered twice.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import STATE_MISSING

from loadtests.context import UsageError, build_context, connect_target
from loadtests.health import HealthSampler
from loadtests.hub import RecordHub
from loadtests.plan import RunOptions
from loadtests.record import RequestRecord
from loadtests.sinks import HarnessHealth, NullSink
from loadtests.users import LLMUser, LoadContext, Phase

log = logging.getLogger(__name__)
FLUSH_S = 0.25
BATCH = 500
#: seconds to wait for workers to connect, set up, or acknowledge a phase
WORKER_TIMEOUT_S = 90.0


class Forwarder(NullSink):
    """Worker side: batches starts and records to the master, in order."""

    def __init__(self, runner: Any, worker: str) -> None:
        self.runner = runner
        self.worker = worker
        self._starts: list[list[str]] = []
        self._records: list[dict[str, Any]] = []
        self._loop = gevent.spawn(self._flush_loop)

    def on_request_start(self, mode: str, scenario: str, endpoint: str) -> None:
        self._starts.append([mode, scenario, endpoint])

    def on_record(self, record: RequestRecord) -> None:
        self._records.append(record.to_dict())
        if len(self._records) >= BATCH:
            self.flush()

    def health(self, snap: HarnessHealth) -> None:
        """Send a health snapshot to the master."""
        self.runner.send_message("llmload_health", {"worker": self.worker, **asdict(snap)})

    def flush(self) -> None:
        """Send whatever is buffered (no switch between taking and sending)."""
        if not self._starts and not self._records:
            return
        starts, records = self._starts, self._records
        self._starts, self._records = [], []
        self.runner.send_message(
            "llmload_batch", {"worker": self.worker, "starts": starts, "records": records}
        )

    def _flush_loop(self) -> None:
        while True:
            gevent.sleep(FLUSH_S)
            self.flush()


class MasterDriver:
    """The master: spawns local workers if asked, sets them up, runs phases on them."""

    def __init__(
        self, environment: Any, opts: RunOptions, hub: RecordHub, model: str, session: Any
    ) -> None:
        self.env = environment
        self.opts = opts
        self.hub = hub
        self.session = session
        self.expect = opts.workers or opts.expect_workers
        self.shards = self.expect
        bind_host = opts.master_host if opts.master else "127.0.0.1"
        port = opts.master_port if opts.master else 0
        self.runner = environment.create_master_runner(bind_host, port)
        self.port = self.runner.server.port
        self.ready: set[str] = set()
        self.failed: list[str] = []
        self.acks: dict[str, dict[str, int]] = {}
        self.names: dict[str, str] = {}  # locust client id -> our worker name
        for name, handler in (
            ("llmload_batch", self._on_batch),
            ("llmload_health", self._on_health),
            ("llmload_ready", self._on_ready),
            ("llmload_failed", self._on_failed),
            ("llmload_flushed", self._on_flushed),
        ):
            self.runner.register_message(name, handler)
        self.procs: list[subprocess.Popen[bytes]] = []
        for _ in range(opts.workers):
            cmd = [sys.executable, "-m", "loadtests", "worker", "--master-port", str(self.port)]
            self.procs.append(subprocess.Popen(cmd, start_new_session=True))
        if opts.master:
            print(f"master: waiting for {self.expect} worker(s) on port {self.port}", flush=True)
        try:
            self._wait(lambda: len(self.runner.clients.ready) >= self.expect, "workers to connect")
            setup = {"options": asdict(opts), "model": model, "shards": self.expect}
            for shard, client in enumerate(sorted(self.runner.clients.ready, key=lambda c: c.id)):
                self.names[client.id] = f"worker-{shard}"
                self.runner.send_message("llmload_setup", {**setup, "shard": shard}, client.id)
            self._wait(lambda: len(self.ready) >= self.expect or bool(self.failed), "worker setup")
            if self.failed:
                raise UsageError(f"worker failed: {self.failed[0]}")
        except BaseException:
            self.close()  # no worker process outlives a master that could not start
            raise

    def _wait(self, done: Any, what: str) -> None:
        deadline = time.monotonic() + WORKER_TIMEOUT_S
        while not done():
            if self.session.interrupted:
                raise RuntimeError(f"interrupted while waiting for {what}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {WORKER_TIMEOUT_S:g}s waiting for {what}")
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"a worker process exited while waiting for {what}")
            gevent.sleep(0.05)

    # -- messages from workers ---------------------------------------------------

    def _on_batch(self, environment: Any, msg: Any) -> None:
        for mode, scenario, endpoint in msg.data["starts"]:
            self.hub.on_request_start(mode, scenario, endpoint)
        for data in msg.data["records"]:
            self.hub.on_record(RequestRecord.from_dict(data))

    def _on_health(self, environment: Any, msg: Any) -> None:
        d = dict(msg.data)
        worker = d.pop("worker")
        self.hub.on_health(worker, HarnessHealth(**d))

    def _on_ready(self, environment: Any, msg: Any) -> None:
        self.ready.add(msg.data["worker"])

    def _on_failed(self, environment: Any, msg: Any) -> None:
        self.failed.append(str(msg.data["error"]))

    def _on_flushed(self, environment: Any, msg: Any) -> None:
        self.acks.setdefault(msg.data["phase"], {})[msg.data["worker"]] = msg.data["issued"]

    # -- Driver ------------------------------------------------------------------

    def begin(self, phase: Phase) -> None:
        self._wait(lambda: len(self.runner.clients.ready) >= self.expect, "workers to be ready")
        self.acks[phase.name] = {}
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
        return all(
            name in acks
            for cid, name in self.names.items()
            if cid in clients and clients[cid].state != STATE_MISSING
        )

    def finish(self, phase: Phase) -> int:
        acks = self.acks.setdefault(phase.name, {})
        try:
            self._wait(lambda: self._flushed(acks), f"workers to flush phase {phase.name}")
        except RuntimeError as exc:
            log.error("%s; records of phase %s may be missing", exc, phase.name)
        return sum(acks.values())

    def close(self) -> None:
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
        environment.events.test_stop.add_listener(self._on_test_stop)

    def _on_setup(self, environment: Any, msg: Any) -> None:
        data = msg.data
        self.name = f"worker-{data['shard']}"
        try:
            opts = RunOptions(**data["options"]).validate()
            target = connect_target(opts)
            self.forwarder = Forwarder(self.runner, self.name)
            shard, shards = data["shard"], data["shards"]
            self.ctx = build_context(
                opts, target, data["model"], self.forwarder, self.name, shard, shards
            )
        except (UsageError, ValueError) as exc:
            self.runner.send_message("llmload_failed", {"worker": self.name, "error": str(exc)})
            return
        self.ctx.watch(environment)
        self._start_health()
        self.runner.send_message("llmload_ready", {"worker": self.name})

    def _start_health(self) -> None:
        ctx, fwd = self.ctx, self.forwarder
        assert ctx is not None and fwd is not None
        self.sampler = HealthSampler(fwd.health, inflight=lambda: ctx.inflight)
        self.sampler.start()

    def _on_phase(self, environment: Any, msg: Any) -> None:
        if self.ctx is not None:
            self.ctx.begin_phase(Phase(**msg.data))

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
        self.runner.send_message("llmload_flushed", data)
        environment.stop_timeout = 0  # locust sleeps stop_timeout after stopping; nothing is left


def worker_main(master_host: str, master_port: int) -> int:
    """``python -m loadtests worker``: serve a master until it quits."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the master handles Ctrl-C for the run
    env = Environment(user_classes=[LLMUser])
    runner = env.create_worker_runner(master_host, master_port)
    state = WorkerState(env, runner)
    runner.greenlet.join()
    if state.sampler is not None:
        state.sampler.stop()
    return 0
