"""``--dataset trace FILE``: the three trace formats read as published, the replay's prompts
(exact lengths, shared Mooncake blocks), its times (window, speedup), its shards, and the laps
a capacity step replays it in."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llmload.loadtests.options import RunOptions, build_options, trace_file
from llmload.loadtests.workload.random_dataset import RandomPrompts, default_codec
from llmload.loadtests.workload.replay import Pace, TraceReplay, TraceSchedule, window_of
from llmload.loadtests.workload.tokencount import Codec
from llmload.loadtests.workload.traces import MOONCAKE_BLOCK, TraceError, read_trace
from tests.fixtures.tokenizer import merging_codec

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


@pytest.fixture(scope="module")
def embedded() -> Codec:
    return default_codec()


def test_each_format_is_told_by_its_content_and_made_relative() -> None:
    moon, burst, azure = (
        read_trace(TRACES / f) for f in ("mooncake.jsonl", "burstgpt.csv", "azure.csv")
    )
    assert (moon.format, burst.format, azure.format) == ("mooncake", "burstgpt", "azure")
    for trace in (moon, burst, azure):
        times = [r.at_s for r in trace.requests]
        assert times[0] == 0.0 and times == sorted(times)
    # Mooncake: milliseconds; the first line is at 300 ms, the second at 450 ms
    assert moon.requests[1].at_s == pytest.approx(0.150)
    assert moon.requests[0].hash_ids == (0, 1, 2) and moon.requests[0].input_len == 1384
    # BurstGPT: seconds; its failed request (0 response tokens) is skipped and counted
    assert len(burst.requests) == 11 and burst.skipped == {"no output tokens": 1}
    assert burst.requests[0].input_len == 108 and burst.requests[0].output_len == 24
    # Azure: date and time with 7 fractional digits
    assert azure.requests[1].at_s == pytest.approx(0.12)
    assert azure.span_s == pytest.approx(48.11059 - 46.80059)


def test_azure_times_with_a_utc_offset_and_unsorted_rows(tmp_path: Path) -> None:
    f = tmp_path / "az.csv"
    f.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:01.5+00:00,10,2\n"
        "2024-05-10 02:00:00+02:00,20,3\n"  # = 00:00:00 UTC: the earliest
    )
    t = read_trace(f)
    assert [(r.line, r.at_s) for r in t.requests] == [(3, 0.0), (2, 1.5)]


@pytest.mark.parametrize(
    ("name", "content", "where"),
    [
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 1',
            ":2: ",
        ),
        ("m.jsonl", '{"timestamp": 0, "input_length": 5}\n', ":1: missing output_length"),
        ("m.jsonl", '{"timestamp": -1, "input_length": 5, "output_length": 2}\n', ":1: timestamp"),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 2.5, "output_length": 2}\n',
            ":1: input_length must be an integer",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 0, "output_length": 2}\n',
            ":1: input_length must be >= 1",
        ),
        (
            "m.jsonl",
            '\n\n{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1]}\n',
            ":3: input_length 600 is 2 block(s)",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 6, "output_length": 2, "hash_ids": ["a"]}\n',
            ":1: hash_ids",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 2}\n[1]\n',
            ":2: expected a JSON object",
        ),
        (
            "b.csv",
            "Timestamp,Model,Request tokens,Response tokens\n1.0,x,5,2\n2.0,x,five,2\n",
            ":3: Request tokens must be an integer",
        ),
        (
            "b.csv",
            "Timestamp,Model,Request tokens,Response tokens\n1.0,x,5\n",
            ":2: 3 fields, the header has 4",
        ),
        (
            "b.csv",
            "Timestamp,Model,Request tokens,Response tokens\nsoon,x,5,2\n",
            ":2: Timestamp must be a number",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-45 99:00:00,5,2\n",
            ":2: TIMESTAMP is not a valid",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,2\n",
            ":2: TIMESTAMP must be a date",
        ),
        ("x.csv", "when,in,out\n1,2,3\n", ":1: not a trace format"),
    ],
)
def test_a_bad_line_is_named_file_and_line(
    tmp_path: Path, name: str, content: str, where: str
) -> None:
    f = tmp_path / name
    f.write_text(content)
    with pytest.raises(TraceError) as err:
        read_trace(f)
    assert str(err.value).startswith(str(f) + where.split(" ")[0]), err.value
    assert where.split(" ", 1)[-1].strip() in str(err.value)


def test_empty_or_all_skipped_traces_say_so(tmp_path: Path) -> None:
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(TraceError, match="empty"):
        read_trace(empty)
    failed = tmp_path / "f.csv"
    failed.write_text("Timestamp,Request tokens,Response tokens\n1,5,0\n2,6,0\n")
    with pytest.raises(TraceError, match="2 skipped: no output tokens"):
        read_trace(failed)
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(tmp_path / "missing.jsonl")


def test_prompts_have_the_traces_lengths_and_its_shared_blocks(embedded: Codec) -> None:
    replay = TraceReplay(read_trace(TRACES / "mooncake.jsonl"), RandomPrompts(embedded))
    prompts = [replay.prompt(i) for i in range(replay.count)]
    for req, p in zip(replay.requests, prompts, strict=True):
        assert len(embedded.encode(p.prompt or "")) == req.input_len
        assert p.max_tokens == p.min_tokens == req.output_len and p.scenario == "trace"
        assert p.messages == [{"role": "user", "content": p.prompt}]
    # requests naming the same first block share its 512 tokens of text, word for word
    words = [(p.prompt or "").split(" ") for p in prompts]
    by_block0 = [w for r, w in zip(replay.requests, words, strict=True) if r.hash_ids[0] == 0]  # type: ignore[index]  # the trace's ids are a tuple at run time
    assert len(by_block0) == len(words) and all(
        w[:MOONCAKE_BLOCK] == words[0][:MOONCAKE_BLOCK]
        for w in by_block0
        if len(w) >= MOONCAKE_BLOCK
    )
    two = [w for r, w in zip(replay.requests, words, strict=True) if r.hash_ids[:3] == (0, 1, 2)]  # type: ignore[index]  # the trace's ids are a tuple at run time
    common = os.path.commonprefix(two)
    assert len(common) >= 2 * MOONCAKE_BLOCK
    lone = [w for r, w in zip(replay.requests, words, strict=True) if r.hash_ids == (0, 10)]
    assert (
        lone
        and lone[0][MOONCAKE_BLOCK : MOONCAKE_BLOCK + 8]
        != two[0][MOONCAKE_BLOCK : MOONCAKE_BLOCK + 8]
    )
    again = TraceReplay(read_trace(TRACES / "mooncake.jsonl"), RandomPrompts(embedded))
    assert again.prompt(4) == prompts[4]  # the same seed: the same text, in any process
    other = TraceReplay(read_trace(TRACES / "mooncake.jsonl"), RandomPrompts(embedded), seed=1)
    assert other.prompt(4).prompt != prompts[4].prompt


def test_a_tokenizer_that_merges_across_words_still_gets_exact_lengths(embedded: Codec) -> None:
    odd = merging_codec(embedded, 2000)
    replay = TraceReplay(read_trace(TRACES / "mooncake.jsonl"), RandomPrompts(odd))
    assert replay.make.additive is False
    for i in range(replay.count):
        assert len(odd.encode(replay.prompt(i).prompt or "")) == replay.requests[i].input_len
    burst = TraceReplay(read_trace(TRACES / "burstgpt.csv"), RandomPrompts(odd))
    for i in range(burst.count):
        assert len(odd.encode(burst.prompt(i).prompt or "")) == burst.requests[i].input_len


def test_window_and_speedup_set_the_send_times(embedded: Codec) -> None:
    trace = read_trace(TRACES / "burstgpt.csv")
    whole = TraceReplay(trace, RandomPrompts(embedded))
    assert whole.offsets == [r.at_s for r in trace.requests]
    part = TraceReplay(trace, RandomPrompts(embedded), speedup=2.0, window="0.2:1.2")
    inside = [r for r in trace.requests if 0.2 <= r.at_s < 1.2]
    assert part.count == len(inside) and 0 < part.count < whole.count
    assert part.offsets == pytest.approx([(r.at_s - 0.2) / 2.0 for r in inside])
    assert part.describe()["trace"]["replayed"] == part.count
    with pytest.raises(ValueError, match="no request inside --trace-window 100:200"):
        TraceReplay(trace, RandomPrompts(embedded), window="100:200")


def test_shards_take_every_nth_request_and_stop_at_the_limit_or_the_phase_end() -> None:
    offsets = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    claims = [TraceSchedule(offsets, 10.0, k, 2) for k in (0, 1)]
    got = [[c.claim() for _ in range(5)] for c in claims]
    assert got[0] == [(0, 0.0), (2, 0.2), (4, 0.4), (6, 0.6), None]
    assert got[1] == [(1, 0.1), (3, 0.3), (5, 0.5), None, None]
    limited = TraceSchedule(offsets, 10.0, limit=3)
    assert [limited.claim() for _ in range(4)][-1] is None and limited.claimed == 3
    short = TraceSchedule(offsets, 0.25)
    assert [short.claim() for _ in range(4)] == [(0, 0.0), (1, 0.1), (2, 0.2), None]


def test_the_trace_options(tmp_path: Path) -> None:
    opts = build_options({}, {"dataset": ["trace", "t.jsonl"], "target": "http://x"})
    assert trace_file(opts.workload.dataset) == "t.jsonl"
    assert opts.load.duration == float("inf")  # the replay's last record ends the phase
    plan = build_options({"dataset": "trace:t.csv", "duration": "30s"}, {})
    assert trace_file(plan.workload.dataset) == "t.csv" and plan.load.duration == 30.0
    assert build_options({}, {"dataset": ["random"]}).workload.dataset == "random"
    for bad, msg in [
        ({"dataset": ["trace", "t.jsonl"], "rate": 5.0}, "--rate cannot be combined"),
        ({"dataset": ["trace", "t.jsonl"], "max_tokens": 5}, "--max-tokens cannot"),
        ({"dataset": ["trace", "t.jsonl"], "turns": 2}, "--turns cannot"),
        ({"dataset": ["trace", "t.jsonl"], "speedup": 0.0}, "--speedup must be > 0"),
        ({"dataset": ["trace", "t.jsonl"], "trace_window": "5"}, "expected START:END"),
        ({"dataset": ["trace", "t.jsonl"], "trace_window": "9:3"}, "START must come before END"),
        ({"speedup": 2.0}, "need --dataset trace FILE"),
        ({"dataset": ["a", "b"]}, "'trace FILE'"),
        ({"dataset": ["trace"]}, "--dataset trace FILE"),
    ]:
        with pytest.raises(ValueError, match=msg):
            build_options({}, bad)
    assert RunOptions().workload.speedup == 1.0


def test_the_fixture_traces_are_what_the_formats_publish() -> None:
    first = json.loads((TRACES / "mooncake.jsonl").read_text().splitlines()[0])
    assert set(first) == {"timestamp", "input_length", "output_length", "hash_ids"}
    assert (
        (TRACES / "burstgpt.csv")
        .read_text()
        .startswith("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
    )
    assert (
        (TRACES / "azure.csv").read_text().startswith("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    )


#: four requests half a second apart: a lap of 2 s, 2 req/s at speedup 1
PACE = Pace((0.0, 0.5, 1.0, 1.5))


def test_a_pace_laps_its_window_one_mean_gap_after_its_last_request() -> None:
    assert PACE.period == 2.0 and PACE.rate == 2.0
    assert [PACE.at(i, 2.0) for i in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]
    # arrivals due before t: the laps so far and the part of the next
    assert [PACE.count_before(t, 1.0) for t in (0.0, 0.1, 1.9, 2.0, 2.6, 4.0)] == [0, 1, 4, 4, 6, 8]
    assert PACE.count_before(1.3, 2.0) == 6  # 2.6 s of the trace at twice its pace
    assert Pace((3.0,)).period is None and Pace((1.0, 1.0)).rate is None
    assert Pace((3.0,)).at(1, 1.0) == float("inf")  # nothing to lap


def test_a_looped_schedule_claims_the_laps_until_the_phase_ends() -> None:
    offsets = [o / 2.0 for o in PACE.offsets]
    sched = TraceSchedule(offsets, 2.3, period=1.0, first=8)
    claims = []
    while (c := sched.claim()) is not None:
        claims.append(c)
    # global indices from the lap it starts at (8: lap 2 of four requests), offsets its own
    assert [i for i, _ in claims] == list(range(8, 8 + 10))
    assert [t for _, t in claims] == pytest.approx([PACE.at(i, 2.0) for i in range(10)])
    assert len(claims) == PACE.count_before(2.3, 2.0)
    # shards still split it: every other arrival, across laps
    halves = [TraceSchedule(offsets, 2.3, k, 2, period=1.0) for k in (0, 1)]
    got = [[halves[k].claim() for _ in range(6)] for k in (0, 1)]
    assert [c[0] for c in got[0] if c] == [0, 2, 4, 6, 8]
    assert [c[0] for c in got[1] if c] == [1, 3, 5, 7, 9]


def test_each_lap_replays_the_window_with_texts_of_its_own() -> None:
    codec = default_codec()
    trace = read_trace(TRACES / "mooncake.jsonl")
    replay = TraceReplay(trace, RandomPrompts(codec), seed=4)
    n = replay.count
    sched = replay.arrivals(replay.pace.at(2 * n + 1, 4.0), speedup=4.0, lap=3)
    first = sched.claim()
    assert first == (3 * n, 0.0)
    lap0, lap3 = replay.prompt(0), replay.prompt(3 * n)
    assert lap0.prompt_id == f"trace/{trace.requests[0].line}"
    assert lap3.prompt_id == f"trace/{trace.requests[0].line}/lap3"
    # the same lengths as the trace's request, other words
    assert lap3.max_tokens == lap0.max_tokens == trace.requests[0].output_len
    assert lap3.prompt != lap0.prompt
    assert len(codec.encode(lap3.prompt or "")) == trace.requests[0].input_len
    # within a lap the trace's shared blocks are shared (the prefix the trace recorded)
    shared = [
        j for j in range(1, n) if trace.requests[j].hash_ids and trace.requests[j].hash_ids[0] == 0
    ]
    assert shared
    j = shared[0]
    block = 40  # words of the first shared block, well inside its 512
    words = lambda p: (p.prompt or "").split()[:block]  # noqa: E731 - a one-line helper local to this function
    assert words(replay.prompt(3 * n + j)) == words(lap3)
    assert words(replay.prompt(j)) == words(lap0) != words(lap3)
    # a replay of `llmload run` is unchanged: once, at --speedup, no laps
    once = replay.arrivals(1e9)
    assert sum(1 for _ in iter(once.claim, None)) == n


def test_window_of_keeps_the_window_and_starts_its_clock_there() -> None:
    trace = read_trace(TRACES / "mooncake.jsonl")
    kept, pace = window_of(trace, "0.5:1.6")
    assert [r.at_s for r in kept] == [r.at_s for r in trace.requests if 0.5 <= r.at_s < 1.6]
    assert pace.offsets == pytest.approx(tuple(r.at_s - 0.5 for r in kept))
    with pytest.raises(ValueError, match="no request inside"):
        window_of(trace, "100:200")
