"""``python -m bench timing-core``: events/s the pure SSE timing core parses on one core.

No sockets: pre-built byte streams in the bundled server's exact chunk format go
through ``StreamTimer`` (framing, adapter, bookkeeping, ``finish``), timed with
the process CPU clock so other processes on a busy machine do not count.  Side
by side, on the same bytes: the SSE framing alone and ``json.loads`` of the data
lines alone (the floor any JSON-based client pays).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

from bench.mdsection import machine, write_section
from llmload.loadtests.measure.adapters.anthropic_messages import AnthropicMessages
from llmload.loadtests.measure.adapters.openai_chat import OpenAIChat
from llmload.loadtests.measure.adapters.openai_completions import OpenAICompletions
from llmload.loadtests.measure.adapters.openai_responses import OpenAIResponses
from llmload.loadtests.measure.sse import SSEParser
from llmload.loadtests.measure.timing import RecordMeta, StreamTimer
from llmload.target_server.chunks import Encoder
from llmload.target_server.engine import TokenPiece
from llmload.target_server.messages_api import MessagesEncoder
from llmload.target_server.responses_api import ResponsesEncoder

WORDS = ["春", "天", "的", " the", " quick", " fox", "，", " jumps", "代码", " over"]
META = RecordMeta("bench", "bench", "bench", "stream", "/v1/chat/completions", 0.0)


def _stream(n: int, *, chat: bool = True) -> list[bytes]:
    """One request's events as the bundled server writes them: role, content, finish, usage."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    head = (
        f'data: {{"id":"chatcmpl-5f3c2a9e1b7d4c68","object":"{kind}","created":1764480000,'
        f'"model":"llmload-tiny","choices":[{{"index":0,'
    ).encode()
    head += b'"delta":{"content":' if chat else b'"text":'
    tail = (b"}" if chat else b"") + b',"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
    events = []
    if chat:
        events.append(head[: -len(b'"content":')] + b'"role":"assistant","content":""' + tail)
    for i in range(n):
        events.append(head + json.dumps(WORDS[i % len(WORDS)], ensure_ascii=False).encode() + tail)
    x = '"x_llmload":{"queue_s":0.0001,"ttft_s":0.2,"e2e_s":0.9}'
    usage = f'"usage":{{"prompt_tokens":12,"completion_tokens":{n},"total_tokens":{n + 12}}}'
    events.append(f'data: {{"object":"{kind}","choices":[],{usage},{x}}}\n\n'.encode())
    events.append(b"data: [DONE]\n\n")
    return events


def _named_stream(n: int, encoder: Encoder) -> list[bytes]:
    """One request's events as the bundled server writes a named-event API's (the
    Responses or Messages API): its opening events, one delta per token, its closing."""
    timings = {"queue_s": 0.0001, "ttft_s": 0.2, "e2e_s": 0.9}
    data = encoder.opening(12, None)
    data += b"".join(encoder.piece(TokenPiece(WORDS[i % len(WORDS)])) for i in range(n))
    data += encoder.closing("stop", 12, n, timings)
    return [event + b"\n\n" for event in data.split(b"\n\n") if event]


def _reads(events: list[bytes], per_read: int, split: bool, crlf: bool) -> list[bytes]:
    if crlf:
        events = [e.replace(b"\n", b"\r\n") for e in events]
    if split:  # every event cut in two reads, mid-JSON
        return [part for e in events for part in (e[: len(e) // 2], e[len(e) // 2 :])]
    return [b"".join(events[i : i + per_read]) for i in range(0, len(events), per_read)]


def _core(reads: list[bytes], adapter_factory: Callable[[], object]) -> Callable[[], None]:
    adapter = adapter_factory()

    def run() -> None:
        timer = StreamTimer(adapter, 0.0)  # type: ignore[arg-type]  # a stand-in adapter object: only parse_event is called
        timer.headers(0.001, 200)
        t = 0.0
        for chunk in reads:
            t += 0.001
            timer.feed(chunk, t)
        record = timer.finish(t, META)
        if record.status != "ok":
            raise RuntimeError(f"benchmark stream did not parse: {record.status} {record.error}")

    return run


def _framing(reads: list[bytes]) -> Callable[[], None]:
    def run() -> None:
        parser = SSEParser()
        for chunk in reads:
            parser.feed(chunk)

    return run


def _json_floor(events: list[bytes]) -> Callable[[], None]:
    lines = [e[6:-2].decode() for e in events]

    def run() -> None:
        for line in lines:
            if line != "[DONE]":
                json.loads(line)

    return run


def _measure(fn: Callable[[], None], streams: int, repeats: int) -> list[float]:
    """CPU seconds per stream, one figure per repeat."""
    out = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(streams):
            fn()
        out.append((time.process_time() - start) / streams)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the cases, print the table, write the ``timing-core`` section."""
    parser = argparse.ArgumentParser(prog="python -m bench timing-core")
    parser.add_argument("--tokens", type=int, default=256, help="content events per stream")
    parser.add_argument("--streams", type=int, default=200, help="streams per repeat")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args, _ = parser.parse_known_args(argv)
    n = args.tokens
    chat, comp = _stream(n), _stream(n, chat=False)
    c1, c16 = _reads(chat, 1, False, False), _reads(chat, 16, False, False)
    split, crlf = _reads(chat, 1, True, False), _reads(chat, 1, False, True)
    comp1 = _reads(comp, 1, False, False)
    responses = _named_stream(
        n, ResponsesEncoder("resp_5f3c2a9e1b7d4c68", "llmload-tiny", [], None)
    )
    messages = _named_stream(n, MessagesEncoder("msg_5f3c2a9e1b7d4c68", "llmload-tiny"))
    resp1, msg1 = _reads(responses, 1, False, False), _reads(messages, 1, False, False)
    cases: list[tuple[str, Callable[[], None]]] = [
        ("timing core, chat, 1 event per read", _core(c1, OpenAIChat)),
        ("timing core, chat, 16 events per read", _core(c16, OpenAIChat)),
        ("timing core, chat, each event split over 2 reads", _core(split, OpenAIChat)),
        ("timing core, chat, CRLF, 1 event per read", _core(crlf, OpenAIChat)),
        ("timing core, completions, 1 event per read", _core(comp1, OpenAICompletions)),
        ("timing core, Responses API, 1 event per read", _core(resp1, OpenAIResponses)),
        ("timing core, Messages API, 1 event per read", _core(msg1, AnthropicMessages)),
        ("SSE framing alone, 1 event per read", _framing(c1)),
        ("`json.loads` of the data lines alone", _json_floor(chat)),
    ]
    load = os.getloadavg()[0]
    rows = []
    results: dict[str, float] = {}
    for name, fn in cases:
        fn()  # warm caches
        per_stream = _measure(fn, args.streams, args.repeats)
        med, best = statistics.median(per_stream), min(per_stream)
        results[name] = med
        rows.append((name, n / med, n / best, med / n * 1e6))
        print(f"{name:52s} {n / med:>10,.0f} ev/s (best {n / best:,.0f}) {med / n * 1e6:.2f} µs/ev")
    # the newer APIs against chat, side by side: each repeat times chat, Responses and
    # Messages in turn, so a slower minute of the machine touches all three alike
    turns: list[tuple[float, float]] = []
    trio = [cases[0][1], cases[5][1], cases[6][1]]
    for _ in range(args.repeats * 2):
        chat_s, resp_s, msg_s = (_measure(fn, args.streams, 1)[0] for fn in trio)
        turns.append((resp_s / chat_s, msg_s / chat_s))
    resp_x = sorted(t[0] for t in turns)
    msg_x = sorted(t[1] for t in turns)
    print(
        f"side by side, {len(turns)} turns: Responses {statistics.median(resp_x):.2f}x chat "
        f"({resp_x[0]:.2f}-{resp_x[-1]:.2f}), Messages {statistics.median(msg_x):.2f}x "
        f"({msg_x[0]:.2f}-{msg_x[-1]:.2f})"
    )
    core = results[cases[0][0]]
    floor = results[cases[-1][0]]
    burst = results[cases[1][0]]
    table = "\n".join(
        f"| {name} | {eps:,.0f} | {best:,.0f} | {us:.2f} |" for name, eps, best, us in rows
    )
    busy = " (measured under load: other jobs were running)" if load > 1.0 else ""
    body = f"""## Timing core: events/s on one core (`timing-core`)

`python -m bench timing-core` — {machine()}. Load average at start: {load:.1f}
on {os.cpu_count()} cores{busy}.
CPU time of this process only (`time.process_time`), {args.streams} streams × {n}
content events (plus role, usage and `[DONE]` events) per repeat, median of {args.repeats} repeats;
each stream includes `StreamTimer` construction and `finish()` (building the record).

| case | events/s (median) | events/s (best) | µs per event |
|---|---|---|---|
{table}

Side by side: the full core costs {core / floor:.2f}× a bare `json.loads` of the same
data lines, and framing alone is {results[cases[-2][0]] / core * 100:.0f} % of the core's time.
Bursty reads (16 events per read) cost {burst / core:.2f}× the one-event-per-read case.
Per content event, measured side by side ({len(turns)} turns of chat, Responses and Messages
in a row, {args.streams} streams each; median and range of each turn's ratio), the
Responses API's stream costs {statistics.median(resp_x):.2f}× chat's
({resp_x[0]:.2f}–{resp_x[-1]:.2f}) and the Messages API's {statistics.median(msg_x):.2f}×
({msg_x[0]:.2f}–{msg_x[-1]:.2f}); their streams also carry a few events that are not
content (an item's or a block's start and end).
At 1,000 concurrent streams × 50 events/s (50,000 events/s) the core alone would use
about {50_000 * core / n * 100:.0f} % of one core; the HTTP client's own cost comes on top
(see the client comparison in the load-generator sections).
"""
    if not args.no_write:
        write_section("timing-core", body)
    return 0
