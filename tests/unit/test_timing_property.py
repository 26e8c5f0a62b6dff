"""Property: any cut of the same byte stream into reads gives the same record."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.loadtests.measure.adapters.openai_chat import OpenAIChat
from llmload.loadtests.measure.timing import StreamTimer
from tests.unit.timing_helpers import DONE, delta, ev, finish, meta, usage

_text = st.text(alphabet=st.sampled_from(list('ab 春天的\n\r:"\\{}')), min_size=0, max_size=6)
_event = st.one_of(
    _text.map(lambda t: delta(t)),
    st.just(delta(role="assistant")),
    st.just(b": keep-alive\n\n"),
    st.just(finish()),
    st.integers(0, 50).map(lambda n: usage(n, x_llmload={"ttft_s": 0.1, "e2e_s": 0.2})),
    st.just(ev({"error": {"message": "boom"}})),
    st.just(b"data: {broken\n\n"),
)
_stream = st.lists(_event, max_size=12).flatmap(
    lambda evs: st.tuples(st.just(evs), st.booleans(), st.sampled_from([b"\n", b"\r\n", b"\r"]))
)


def _record(writes: list[tuple[bytes, float]], cuts_per_write: list[list[int]] | None):
    """Feed each server write as reads cut at ``cuts`` (all stamped with the write's time)."""
    timer = StreamTimer(OpenAIChat(), 0.0, tokenizer=None)
    timer.headers(0.001, 200)
    for i, (raw, t) in enumerate(writes):
        cuts = sorted(set(cuts_per_write[i])) if cuts_per_write else []
        for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True):
            timer.feed(raw[a:b], t)
    return timer.finish(10.0, meta()), timer.text


def _writes(events: list[bytes], done: bool, eol: bytes) -> list[tuple[bytes, float]]:
    raws = [*events, DONE] if done else events
    return [(r.replace(b"\n", eol), 0.1 * (i + 1)) for i, r in enumerate(raws)]


@settings(max_examples=150, deadline=None)
@given(_stream, st.data())
def test_rechunking_each_write_gives_the_same_record(stream, data):
    events, done, eol = stream
    writes = _writes(events, done, eol)
    whole = _record(writes, None)
    cuts = [data.draw(st.lists(st.integers(0, len(raw)), max_size=6)) for raw, _ in writes]
    assert _record(writes, cuts) == whole


@settings(max_examples=150, deadline=None)
@given(_stream, st.data())
def test_rechunking_a_burst_gives_the_same_record(stream, data):
    """Everything arrives at one instant (a buffering proxy): any cut of the whole burst."""
    events, done, eol = stream
    raw = b"".join(r for r, _ in _writes(events, done, eol))
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=20))
    assert _record([(raw, 0.5)], [cuts]) == _record([(raw, 0.5)], None)


@settings(max_examples=60, deadline=None)
@given(_stream)
def test_byte_by_byte_equals_one_read(stream):
    events, done, eol = stream
    writes = _writes(events, done, eol)
    per_byte = [list(range(1, len(raw))) for raw, _ in writes]
    assert _record(writes, per_byte) == _record(writes, None)
