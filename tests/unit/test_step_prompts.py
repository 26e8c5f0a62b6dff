"""Which prompts a phase sends (``Phase.lap``, ``LoadContext.user_prompts`` / ``arrival_prompts``):
every phase of ``llmload run`` the same ones, each step of a capacity search its own — so a
server's prefix cache cannot serve a step the prompts of the one before — the same seed the
same prompts.  No sockets: the context is driven as the users drive it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from llmload.capacity.plan import CapacityOptions, CapacitySearch
from llmload.loadtests.options import build_options
from llmload.loadtests.run.context import LoadContext
from llmload.loadtests.run.phaseloop import plan_phases
from llmload.loadtests.run.phases import Phase
from llmload.loadtests.run.sinks import NullSink
from llmload.loadtests.workload.agent import AgentWorkload
from llmload.loadtests.workload.random_dataset import RandomPrompts, default_codec
from llmload.loadtests.workload.replay import TraceReplay
from llmload.loadtests.workload.sampler import Workload, load_workload
from llmload.loadtests.workload.traces import read_trace
from tests.fixtures.reports import make_records
from tests.unit.test_capacity_plan import CLOSED_LOOP

TARGET = {"target": "http://127.0.0.1:9"}
TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


def context(workload: Any) -> LoadContext:
    """A process's context as its users read it (no target: nothing is sent)."""
    opts = build_options({}, TARGET)
    return LoadContext(
        connection=opts.connection,
        load=opts.load,
        sampling=opts.workload,
        target=None,  # type: ignore[arg-type]  # a test value outside the declared type, on purpose
        workload=workload,
        sink=NullSink(),
        model="m",
    )


def text(source: Any) -> str:
    p = source.next()
    return str(p.prompt or p.messages[-1]["content"])


def step(name: str, lap: int, *, rate: float | None = None, warmup: bool = False) -> Phase:
    return Phase(name, "stream", 5.0, warmup, users=4, rate=rate, lap=lap)


@pytest.fixture(scope="module")
def generated() -> Workload:
    """``--dataset random``: every draw a fresh text (short, so the test is quick)."""
    return load_workload(dataset="random", input_len=12, output_len=4, seed=7)


def test_a_plain_runs_phases_send_the_same_prompts() -> None:
    """Sync then stream, ``--repeat``: every measured phase is lap 0, user i the same
    sequence in each (a like-for-like comparison); the warm-up's users are others."""
    deck = load_workload("short_qa", seed=2)
    ctx = context(deck)
    sent = {}
    for name in ("sync", "stream", "stream-2"):
        ctx.begin_phase(Phase(name, "stream", 5.0))
        user = ctx.user_prompts(0)
        sent[name] = [text(user) for _ in range(6)]
    assert sent["sync"] == sent["stream"] == sent["stream-2"]
    for phase in plan_phases(build_options({"warmup": "5s", "repeat": 2}, TARGET).load):
        assert phase.lap == 0


def test_closed_loop_steps_deal_each_users_deck_on() -> None:
    """A fixed deck: step k's user i goes on where it stopped in the step before, so no
    prompt recurs before its deck is dealt out — as in one long run — and the same seed
    gives the same sequence."""
    deck = load_workload("short_qa", seed=2)
    size = len(deck.pools[0].items)
    ctx = context(deck)
    per_step = 5
    drawn: list[str] = []
    laps = range(1, size // per_step + 1)
    for lap in laps:
        ctx.begin_phase(step(f"step{lap:02d}", lap))
        user = ctx.user_prompts(0)
        drawn += [text(user) for _ in range(per_step)]
    assert len(set(drawn)) == len(drawn) == per_step * len(laps)
    # the same as one user dealing one deck from the first step on (seeded with its lap)
    one = deck.for_user(0, 1)
    assert drawn == [text(one) for _ in drawn]
    # a user first seen at a later step has a sequence of that lap's own
    assert text(ctx.user_prompts(9)) == text(deck.for_user(9, len(laps)))


def test_closed_loop_steps_of_a_generated_dataset_send_new_texts(generated: Workload) -> None:
    def search() -> list[list[str]]:
        ctx = context(generated)
        ctx.begin_phase(step("warmup", 0, warmup=True))
        steps = []
        for lap, users in ((1, 2), (2, 3), (3, 4)):
            ctx.begin_phase(step(f"step{lap:02d}", lap))
            sources = [ctx.user_prompts(u) for u in range(users)]  # as each user's on_start
            steps.append([text(src) for src in sources for _ in range(3)])
        return steps

    steps = search()
    every = [t for s in steps for t in s]
    assert len(set(every)) == len(every)  # no text twice, across users and steps
    plain = context(generated)
    plain.begin_phase(Phase("stream", "stream", 5.0))
    assert not set(every) & {text(plain.user_prompts(u)) for u in range(4)}
    assert search() == steps  # the same seed: the same texts, step by step


def test_open_loop_arrivals_of_each_step_and_the_warmup_are_their_own(
    generated: Workload,
) -> None:
    def arrivals(phase: Phase, n: int = 10) -> list[str]:
        ctx = context(generated)
        ctx.begin_phase(phase)
        return [text(ctx.arrival_prompts(i)) for i in range(n)]

    warm = arrivals(step("warmup", 0, rate=5.0, warmup=True))
    steps = [arrivals(step(f"step{k:02d}", k, rate=5.0 * k)) for k in (1, 2, 3)]
    plain = arrivals(Phase("stream", "stream", 5.0, rate=5.0))
    every = warm + plain + [t for s in steps for t in s]
    assert len(set(every)) == len(every)
    # reproducible: an arrival's prompt is its seed's, index's and lap's
    assert arrivals(step("step02", 2, rate=10.0)) == steps[1]
    assert arrivals(Phase("sync", "sync", 5.0, rate=5.0)) == plain


def test_agent_sessions_of_a_later_lap_have_tasks_and_ids_of_their_own() -> None:
    tasks = load_workload("short_qa", seed=1)
    agents = AgentWorkload(tasks, RandomPrompts(default_codec()), steps=3, seed=1)
    first, later = agents.for_user(3), agents.for_user(3, 2)
    a, b = [first.next() for _ in range(4)], [later.next() for _ in range(4)]
    assert [p.session_id for p in a] == ["3-0", "3-1", "3-2", "3-3"]
    assert [p.session_id for p in b] == ["3-0.2", "3-1.2", "3-2.2", "3-3.2"]
    assert [p.messages for p in a] != [p.messages for p in b]


def plan_laps(copts: CapacityOptions) -> list[Phase]:
    """Every phase of a search whose TTFT grows 45 ms per unit of load (p50 <= 300 ms)."""
    plan = CapacitySearch(copts, build_options({}, TARGET))
    phases = []
    for i, phase in enumerate(plan):
        assert i < 30, "the plan never ended"
        phases.append(phase)
        load = phase.rate if phase.rate is not None else phase.users
        assert load is not None
        n = phase.requests or int(phase.duration * (phase.rate or 1))
        plan.on_phase(phase.name, phase.mode, "start", 100.0 * i)
        for r in make_records(phase.name, phase.mode, n, t_start=100.0 * i, ttft_ms=45.0 * load):
            plan.on_record(r)
        plan.on_phase(phase.name, phase.mode, "end", 100.0 * i + 10.0)
    return phases


@pytest.mark.parametrize("open_loop", [False, True])
def test_every_phase_of_a_search_draws_a_lap_of_its_own(open_loop: bool) -> None:
    copts = replace(CLOSED_LOOP, open_loop=open_loop, min_step_s=1.0)
    phases = plan_laps(copts)
    assert phases[0].warmup and len(phases) > 3
    assert [p.lap for p in phases] == list(range(len(phases)))


def test_a_plain_trace_runs_warmup_replays_texts_of_its_own() -> None:
    """``llmload run --dataset trace``: the warm-up replays the trace's start with lap 1's
    texts; the measured phases replay lap 0's (the warm-up primed no cache for them)."""
    trace = read_trace(TRACES / "mooncake.jsonl")
    replay = TraceReplay(trace, RandomPrompts(default_codec()), seed=4)
    warm, *measured = plan_phases(build_options({"warmup": "5s"}, TARGET).load, replay.count)
    assert (warm.warmup, warm.lap) == (True, 1)
    assert [p.lap for p in measured] == [0, 0]  # sync, stream
    ctx = context(replay)
    ctx.begin_phase(warm)
    assert ctx.schedule is not None
    index, _ = ctx.schedule.claim() or (None, None)
    assert index == replay.count
    assert ctx.arrival_prompts(index).next().prompt_id.endswith("/lap1")
    ctx.begin_phase(measured[0])
    assert ctx.schedule.claim() == (0, 0.0)
