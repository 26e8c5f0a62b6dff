"""target_server.generation._Ticker: a timetable streamed from the pacer's ticks, no sockets.

The tick writes each due piece through the connection's writer and stamps it; what
the writer refuses (paused or closed connection) and fault pieces go back to the
request's task; a stopped stream's armed tick does nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from time import perf_counter

from llmload.target_server.chunks import ChunkEncoder
from llmload.target_server.engine import TokenPiece
from llmload.target_server.generation import _Tally, _Ticker
from llmload.target_server.pacer import Pacer
from llmload.target_server.state import RequestContext


class Writer:
    """A connection that takes chunks while ``open``; records what and when."""

    def __init__(self) -> None:
        self.open = True
        self.chunks: list[tuple[float, bytes]] = []

    def write(self, body: bytes) -> bool:
        if self.open:
            self.chunks.append((perf_counter(), body))
        return self.open


class Gaps:
    def __init__(self) -> None:
        self.values: list[float] = []

    def observe(self, value: float) -> None:
        self.values.append(value)


def table(start: float, pieces: list[TokenPiece], gap: float) -> Iterator[tuple[float, TokenPiece]]:
    for i, p in enumerate(pieces):
        yield start + i * gap, p


def ticker(pieces: list[TokenPiece], gap: float = 0.004, first_in: float = 0.02):
    ctx = RequestContext("chatcmpl-x", "/v1/chat/completions", perf_counter())
    tally = _Tally(ctx, Gaps())
    writer = Writer()
    enc = ChunkEncoder("/v1/chat/completions", "chatcmpl-x", "m", False)
    start = perf_counter() + first_in
    t = _Ticker(table(start, pieces, gap), writer, Pacer(), enc, tally)  # type: ignore[arg-type]  # a test value outside the declared type, on purpose
    return t, writer, tally, ctx, start, enc


WORDS = [TokenPiece(f" w{i}") for i in range(7)] + [TokenPiece(" end", finish_reason="length")]


def test_each_piece_written_in_its_tick_the_first_never_early() -> None:
    async def main():
        t, writer, tally, ctx, start, enc = ticker(WORDS)
        assert await t.run() is None  # the stream ended from the ticks alone
        return t, writer, tally, ctx, start, enc

    t, writer, tally, ctx, start, enc = asyncio.run(main())
    assert t.reason == "length" and tally.n == 8
    assert [b for _, b in writer.chunks] == [enc.content(p.text) for p in WORDS]
    times = [w for w, _ in writer.chunks]
    assert times[0] >= start and ctx.first is not None and ctx.first >= start
    assert times == sorted(times) and len(tally.itl.values) == 7  # one gap per later event
    tally.close()
    assert ctx.output_tokens == 8 and ctx.last == tally.last


def test_refused_and_fault_pieces_come_back_to_the_task_and_the_stream_goes_on() -> None:
    pieces = [
        TokenPiece(" a"),
        TokenPiece(" b", fault="malformed"),
        TokenPiece(" c"),
        TokenPiece(" d", finish_reason="stop"),
    ]

    async def main():
        t, writer, tally, _ctx, _, _enc = ticker(pieces, gap=0.003)
        back = await t.run()
        assert back is not None and back.fault == "malformed"  # acted out by the task
        tally.n += 1
        writer.open = False  # the client stops reading: the tick must not write
        back = await t.run()
        assert back is not None and back.text == " c" and len(writer.chunks) == 1
        tally.n += 1
        writer.open = True
        assert await t.run() is None
        return t, writer, tally

    t, writer, tally = asyncio.run(main())
    assert t.reason == "stop" and tally.n == 4 and len(writer.chunks) == 2


def test_a_stopped_stream_ignores_its_armed_tick() -> None:
    async def main():
        t, writer, _tally, _ctx, _, _enc = ticker(WORDS, first_in=0.01)
        waiter = t.run()
        t.stop()  # the client left: the task was cancelled
        await asyncio.sleep(0.03)  # past the armed tick
        return waiter, writer, t

    waiter, writer, t = asyncio.run(main())
    assert waiter.cancelled() and writer.chunks == [] and t.reason is None
