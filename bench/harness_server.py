"""A minimal SSE reference server for ``bench harness``: it stamps when it *wrote* the first token.

``python -m bench.harness_server TTFT_MS ITL_MS`` listens on 127.0.0.1:0 (prints
``listening on http://HOST:PORT``), speaks just enough HTTP/1.1 (keep-alive,
chunked) and OpenAI chat streaming for the harness, and reports in the final
chunk's ``x_llmload.ttft_s`` the time from the client's ``t0`` (sent in the
``x-bench-t0`` header; ``perf_counter`` is one system-wide monotonic clock on
Linux) to the moment the first content event was handed to the kernel.  So
client TTFT − that value is the harness's own delay: transport plus the
client's reading, and nothing the server's event loop did before writing.
``x_llmload.queue_s`` is ``t0`` -> the whole request read (connection set-up
and the request's write included), so ``ttft_s - queue_s`` is the server's own
TTFT as a server measures it (from the request's arrival).

``x_llmload.write_s`` is how long that first write took, from the call to the
stamp after it: how late ``ttft_s``'s stamp can be.  On loopback the kernel
stamps the client's copy (``SO_TIMESTAMPNS``) inside the write, so a client that
times reads by those stamps can see its first token up to ``write_s`` *before*
this server's stamp — a write descheduled on a busy machine makes that
milliseconds.  A check of client TTFT − ``ttft_s`` is bounded below by
``-write_s``, not by zero.

``--close`` (third argument ``close``): answer HTTP/1.0-style, ``Connection:
close`` and a close-delimited body (no chunked framing, no length), one
request per connection — old proxies, simple servers, some gateways.
"""

from __future__ import annotations

import asyncio
import json
import sys
from time import perf_counter

from llmload.common import gcpolicy

HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n"
)


HEAD_CLOSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"connection: close\r\ncache-control: no-cache\r\n\r\n"
)


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict, close: bool = False) -> bytes:
    payload = b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
    return payload if close else _chunk(payload)


async def _serve_one(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    ttft: float,
    itl: float,
    close: bool = False,
) -> bool:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    arrival = perf_counter()
    t0 = float(headers.get("x-bench-t0", arrival))
    if b"/v1/models" in head.split(b"\r\n", 1)[0]:
        data = json.dumps({"object": "list", "data": [{"id": "reference"}]}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(data), data))
        return not close
    req = json.loads(body)
    n = int(req.get("max_tokens", 16))
    writer.write(HEAD_CLOSE if close else HEAD)
    await asyncio.sleep(ttft)
    first = write_s = None
    for i in range(n):
        event = _event({"choices": [{"index": 0, "delta": {"content": f" t{i}"}}]}, close)
        before = perf_counter()
        writer.write(event)
        if first is None:
            first = perf_counter()
            write_s = first - before
        await asyncio.sleep(itl)
    final = {
        "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": n},
        "x_llmload": {
            "ttft_s": (first or perf_counter()) - t0,
            "queue_s": arrival - t0,
            "write_s": write_s or 0.0,
        },
    }
    if close:
        writer.write(_event(final, close) + b"data: [DONE]\n\n")
        await writer.drain()
        return False  # the end of the body is the end of the connection
    writer.write(_event(final) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()
    return True


async def _main(ttft: float, itl: float, close: bool = False) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await _serve_one(reader, writer, ttft, itl, close):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)
    host, port = server.sockets[0].getsockname()[:2]
    # its own collector pauses would come out as bursts of late tokens that the client
    # then reads one after another: the reference keeps them as short as the server's
    gcpolicy.settle()
    print(f"listening on http://{host}:{port}", file=sys.stderr, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    close = sys.argv[3:4] == ["close"]
    main = _main(float(sys.argv[1]) / 1000, float(sys.argv[2]) / 1000, close)
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)
