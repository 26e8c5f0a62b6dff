"""llmload.loadtests.run.runner.LocalDriver's end of a phase: drain, then stop the users.

Importing the runner imports locust, which monkey-patches the whole process for
gevent: the checks run in a child process, not in the test session.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, time
from types import SimpleNamespace

import gevent

from llmload.loadtests.run.runner import IDLE_STOP_S, LocalDriver


class FakeRunner:
    def __init__(self, ctx):
        self.ctx, self.stopped_with_inflight = ctx, []

    def stop(self):
        self.stopped_with_inflight.append(self.ctx.inflight)


def driver(inflight, drain_timeout=30.0):
    ctx = SimpleNamespace(inflight=inflight, accepting=True, started_while_draining=0,
                          load=SimpleNamespace(drain_timeout=drain_timeout))
    ctx.stop_accepting = lambda: setattr(ctx, "accepting", False)
    env = SimpleNamespace(stop_timeout=None)
    env.create_local_runner = lambda: FakeRunner(ctx)
    return LocalDriver(env, ctx), ctx


def run(inflight, force, drain_timeout=30.0, finishes=True):
    drv, ctx = driver(inflight, drain_timeout)

    def requests_in_flight():
        while ctx.inflight and finishes:
            gevent.sleep(0.03)
            ctx.started_while_draining += ctx.accepting
            ctx.inflight -= 1

    finishing = gevent.spawn(requests_in_flight)
    began = time.monotonic()
    drv.stop(force=force)
    took = time.monotonic() - began
    finishing.kill()
    return {"stopped_with_inflight": drv.runner.stopped_with_inflight,
            "stop_timeout": drv.env.stop_timeout, "took": took,
            "accepting": ctx.accepting, "started_while_draining": ctx.started_while_draining}


print(json.dumps({
    "drain": run(3, force=False),
    "interrupt": run(3, force=True),
    "stuck": run(1, force=False, drain_timeout=0.5, finishes=False),
    "idle_stop_s": IDLE_STOP_S,
}))
"""


@functools.cache
def outcome() -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_the_users_stop_only_once_their_requests_are_done() -> None:
    # stopping 1,000 users holds the loop for tens of ms: requests still in flight would
    # have their first tokens read late, so the phase drains before locust stops anyone
    drain = outcome()["drain"]
    assert drain["stopped_with_inflight"] == [0]
    assert not drain["accepting"] and drain["started_while_draining"] == 0
    # nothing in flight: the users are between requests
    assert drain["stop_timeout"] == outcome()["idle_stop_s"]


def test_an_interrupt_stops_at_once() -> None:
    interrupt = outcome()["interrupt"]
    assert interrupt["stopped_with_inflight"] == [3]
    assert interrupt["stop_timeout"] == 0 and interrupt["took"] < 1.0


def test_a_request_that_never_ends_does_not_hold_the_phase_forever() -> None:
    stuck = outcome()["stuck"]  # the drain waits --drain-timeout (0.5 s here) at most
    assert stuck["stopped_with_inflight"] == [1]
    # then locust kills what is in flight at once (each a cancelled record: the
    # end-to-end test is tests/integration/test_endless_servers.py)
    assert stuck["stop_timeout"] == 0
    assert 0.5 <= stuck["took"] < 0.5 + 10 * 0.03 + 1.0  # the drain, its polls, the stop
