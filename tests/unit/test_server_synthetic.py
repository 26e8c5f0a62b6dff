"""The synthetic engine on its own: timetable, lengths, seeds, faults, aclose."""

from __future__ import annotations

import asyncio
import json
from time import perf_counter

import pytest

from llmload.target_server.engine import EngineFault, GenerationRequest, build_engine
from llmload.target_server.settings import Settings


def engine(**kw):
    return build_engine(Settings(**kw))


def req(n=8, **kw):
    return GenerationRequest(request_id="r", messages=None, prompt="abcdefgh", max_tokens=n, **kw)


async def loop_lag(stop, tick=0.002):
    """The event loop's worst wake-up lateness until ``stop`` is set (a reference clock)."""
    worst = 0.0
    while not stop.is_set():
        began = perf_counter()
        await asyncio.sleep(tick)
        worst = max(worst, perf_counter() - began - tick)
    return worst


def run_timed(coro):
    """``asyncio.run(coro)`` with a ticker beside it: ``(result, the loop's worst lag)``.

    The engine's timers can fire no earlier than asked, and no later than the loop lets
    them: an upper bound is the lab bound plus this lag, measured in the same run, so the
    tests hold when a busy neighbour holds the process off the CPU.
    """

    async def go():
        stop = asyncio.Event()
        ticker = asyncio.create_task(loop_lag(stop))
        try:
            result = await coro
        finally:
            stop.set()
        return result, await ticker

    return asyncio.run(go())


async def collect(eng, request):
    prepared = eng.prepare(request)
    t0 = perf_counter()
    times, pieces = [], []
    async for p in eng.generate(prepared):
        times.append(perf_counter() - t0)
        pieces.append(p)
    return times, pieces


def test_timetable_without_accumulated_error():
    eng = engine(ttft_ms=30, itl_ms=10, prefill_ms_per_token=5)
    (times, pieces), lag = run_timed(collect(eng, req(20, ignore_eos=True)))
    assert len(pieces) == 20 and pieces[-1].finish_reason == "length"
    assert all(p.finish_reason is None for p in pieces[:-1])
    first = 0.030 + 0.005 * 2  # prompt "abcdefgh" = 2 synthetic tokens
    assert first <= times[0] < first + 0.015 + lag
    # decode is timed from the first token; absolute deadlines: no drift over 19 gaps
    # (uvloop-style timers may fire up to 0.5 ms early on a later token)
    assert 19 * 0.010 - 0.001 <= times[-1] - times[0] < 19 * 0.010 + 0.015 + lag


def test_the_ttft_counts_from_since():
    # the server passes the request's arrival (+ its wait for a slot): the time it spent
    # reading and checking the request is inside the configured TTFT, not added to it
    eng = engine(ttft_ms=30, itl_ms=10, prefill_ms_per_token=5)
    since = perf_counter() - 0.012
    table = eng.timetable(eng.prepare(req(3, ignore_eos=True)), since=since)
    first, _ = next(table)
    table.close()
    assert first == pytest.approx(since + 0.030 + 0.005 * 2, abs=1e-9)
    prepared = eng.prepare(req(3, ignore_eos=True))
    began = perf_counter()
    plain = eng.timetable(prepared)
    default, _ = next(plain)
    plain.close()
    assert began + 0.040 <= default <= perf_counter() + 0.040


def test_length_distribution_is_seeded_and_bounded():
    eng = engine(ttft_ms=0, itl_ms=0)
    lens = [len(asyncio.run(collect(eng, req(50, min_tokens=10, seed=s)))[1]) for s in range(30)]
    again = [len(asyncio.run(collect(eng, req(50, min_tokens=10, seed=s)))[1]) for s in range(30)]
    assert lens == again and all(10 <= n <= 50 for n in lens) and len(set(lens)) > 5
    _, pieces = asyncio.run(collect(eng, req(50, min_tokens=10, seed=0)))
    assert pieces[-1].finish_reason == ("length" if len(pieces) == 50 else "stop")


def test_jitter_is_seeded_and_bounded():
    def gaps(seed):
        eng = engine(ttft_ms=0, itl_ms=10, jitter_ms=4, seed=seed)
        return run_timed(collect(eng, req(15, ignore_eos=True)))

    (t, _), lag = gaps(1)
    diffs = [b - a for a, b in zip(t, t[1:], strict=False)]
    assert all(d >= 0 for d in diffs) and max(diffs) < 0.010 + 2 * 0.004 + 0.01 + lag
    assert abs(t[-1] - 14 * 0.010) < 0.004 + 0.01 + lag


def test_stop_string_ends_the_request():
    eng = engine(ttft_ms=0, itl_ms=0)
    _, pieces = asyncio.run(collect(eng, req(100, ignore_eos=True, stop=("fox",))))
    assert pieces[-1].finish_reason == "stop" and pieces[-1].text == ""
    assert "fox" not in "".join(p.text for p in pieces)


def test_fail_rate_raises_before_the_iterator_exists():
    eng = engine(fail_rate=1.0)
    with pytest.raises(EngineFault):
        eng.generate(eng.prepare(req()))


@pytest.mark.parametrize("kind", ["disconnect", "malformed", "stall"])
def test_fault_marks_one_piece(kind):
    eng = engine(ttft_ms=0, itl_ms=0, stall_s=0.05, **{f"{kind}_rate": 1.0})
    times, pieces = asyncio.run(collect(eng, req(10, ignore_eos=True)))
    marked = [i for i, p in enumerate(pieces) if p.fault == kind]
    assert len(marked) == 1 and 1 <= marked[0] <= 9
    if kind == "stall":
        assert times[marked[0]] - times[marked[0] - 1] >= 0.05


def test_aclose_stops_generation_and_running_count():
    async def go():
        eng = engine(ttft_ms=0, itl_ms=5)
        it = eng.generate(eng.prepare(req(1000, ignore_eos=True)))
        await it.__anext__()
        assert eng.running() == 1
        await it.aclose()
        return eng.running()

    assert asyncio.run(go()) == 0


def test_prompt_token_count():
    eng = engine()
    chat = GenerationRequest(
        request_id="c", messages=[{"role": "user", "content": "x" * 9}], prompt=None, max_tokens=1
    )
    assert eng.prepare(chat).prompt_tokens == 4 + 3
    assert eng.prepare(req()).prompt_tokens == 2


def test_itl_grows_with_running_requests():
    async def go():
        eng = engine(ttft_ms=5, itl_ms=10, itl_growth_ms=10)
        alone = await collect(eng, req(6, ignore_eos=True))
        pair = await asyncio.gather(*(collect(eng, req(6, ignore_eos=True)) for _ in range(2)))
        return alone[0], pair[0][0]

    (alone, crowded), lag = run_timed(go())
    span_alone, span_crowded = alone[-1] - alone[0], crowded[-1] - crowded[0]
    assert 5 * 0.010 - 0.001 <= span_alone < 5 * 0.010 + 0.010 + lag
    assert 5 * 0.020 - 0.001 <= span_crowded < 5 * 0.020 + 0.010 + lag  # one other: +10 ms


def chat(n=8, **kw):
    return GenerationRequest(
        request_id="r",
        messages=[{"role": "user", "content": "hi"}],
        prompt=None,
        max_tokens=n,
        ignore_eos=True,
        **kw,
    )


def plan(eng, request):
    return [piece for _, piece in eng.timetable(eng.prepare(request))]


def test_answer_shapes_reasoning_tool_call_and_empty():
    pieces = plan(engine(reasoning_tokens=3), chat(8))
    assert [p.kind for p in pieces] == ["reasoning"] * 3 + ["content"] * 5
    assert pieces[-1].finish_reason == "length"
    pieces = plan(engine(reasoning_tokens=2), chat(6, tools=("get_weather", "search")))
    assert [p.kind for p in pieces] == ["reasoning"] * 2 + ["tool_name"] + ["tool_args"] * 3
    assert pieces[2].text == "get_weather" and pieces[-1].finish_reason == "tool_calls"
    args = json.loads("".join(p.text for p in pieces[3:]))
    assert len(args["query"].split()) == 3
    assert [p.kind for p in plan(engine(), chat(1, tools=("f",)))] == ["tool_name"]
    assert {p.kind for p in plan(engine(tool_call_rate=0.0), chat(4, tools=("f",)))} == {"content"}
    forced = plan(engine(tool_call_rate=0.0), chat(4, tools=("f",), tool_required=True))
    assert forced[0].kind == "tool_name"
    empty = plan(engine(empty_rate=1.0, reasoning_tokens=2), chat(5, tools=("f",)))
    assert [p.text for p in empty] == [""] * 5 and empty[-1].finish_reason == "length"
    # a completions request has no reasoning or tool channel
    assert {p.kind for p in plan(engine(reasoning_tokens=3), req(4, ignore_eos=True))} == {
        "content"
    }


def test_answer_shape_rates_are_seeded_and_leave_other_draws_alone():
    def kinds(**kw):
        eng = engine(seed=5, **kw)
        return [plan(eng, chat(3, tools=("f",)))[0].kind for _ in range(200)]

    half = kinds(tool_call_rate=0.5)
    assert half == kinds(tool_call_rate=0.5) and 60 <= half.count("tool_name") <= 140

    # rates of 0 and 1 draw nothing: the words and lengths of a plan stay those of a server
    # without the flags
    def words(**kw):
        eng = engine(seed=5, **kw)
        return [[p.text for p in plan(eng, req(6))] for _ in range(20)]

    assert words() == words(tool_call_rate=0.0) == words(empty_rate=0.0, reasoning_tokens=0)


def test_answer_shape_settings_are_checked():
    for bad in ({"tool_call_rate": 1.5}, {"empty_rate": -0.1}, {"reasoning_tokens": -1}):
        with pytest.raises(ValueError):
            Settings(**bad)
