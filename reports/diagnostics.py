"""Diagnostics: problems a phase's records reveal on their own (pure functions).

``detect(records, phase)`` returns ``Diagnostic``s, each with a stable ``code``,
a plain-language ``message``, a ``hint`` (what to change) and the ``evidence``
numbers.  ``reports.summary`` puts them in the phase's ``diagnostics`` list.

``proxy_buffering``: something between client and server (nginx's default
``proxy_buffering on``, a CDN) holds the event stream and releases it in bursts.
A streamed response is *buffered* when it has at least ``MIN_EVENTS`` content
events, at least ``BURST_SHARE`` of its inter-event gaps are under
``BURST_GAP_S`` (the events arrived together), and its first token was held
back: with the server's own timings, client TTFT exceeds server TTFT by at least
``HELD_SHARE`` of the server's generation time (``server_e2e - server_ttft``) and
by at least ``MIN_LAG_S``; without them, TTFT is at least ``TTFT_E2E_SHARE`` of
e2e.  The phase is flagged when at least ``FLAG_SHARE`` of at least
``MIN_REQUESTS`` such responses were buffered.  A fast server (sub-millisecond
tokens) is not flagged when it reports its timings: nothing was held back.

``token_count_mismatch``: ``--tokenizer`` counts disagree with the server's
``usage`` (by more than one token and more than ``MISMATCH_TOLERANCE`` of it —
an end-of-sequence token is in ``usage`` but not in the text; a client count that
is just the content-event count, as without ``--tokenizer``, is no evidence) on at least
``MISMATCH_FLAG_RATE`` of the requests that have both: usually the tokenizer is
not the model's.

``stream_stutter``: tokens reach the client in clumps — whatever sits in between
(an LLM gateway that re-chunks, a proxy, a busy load balancer).  Judged from the
client's own gaps alone, so it works when a gateway strips the server's
timings: a streamed response *stutters* when it has at least ``STUTTER_MIN_GAPS``
gaps, at least ``STUTTER_CLUMP_SHARE`` of them under ``BURST_GAP_S`` (bimodal:
tokens that arrived together beside tokens that waited), and at least one stall
— a gap of ``STALL_MIN_S`` or more and ``STALL_FACTOR`` × the median gap —
followed at once by a burst of ``BURST_RUN`` gaps under ``BURST_GAP_S``.  The
phase is flagged when ``STUTTER_FLAG_SHARE`` of at least ``MIN_REQUESTS`` judged
responses stutter, and ``proxy_buffering`` (the same cause, held to the end) did
not already explain it.  When the records carry no server timings, both
diagnostics say which numbers can no longer be split into server and path.

``target_saturated``: the target could not keep up (``reports.saturation``).

``connection_per_request``: the target closed the connection after each
response, so every request paid for a new one (TCP, plus TLS for https) inside
its TTFT.  Judged on each user's requests after its first (a kept-alive
connection is opened once per user): flagged when at least
``NEW_CONNECTION_SHARE`` of at least ``MIN_REQUESTS`` of them opened one
(record field ``connect_s``).

``context_overflow``: requests the target refused because prompt + ``max_tokens``
exceeded its context length (``loadtests.measure.overflow``); the hint says what
to change.

``no_done_marker``: the server ends its streams without ``data: [DONE]`` (for
example ``transformers serve``); each such stream delivered its finish_reason
and a clean end of body, so it counted as ``ok`` (record field ``stream_end``
is ``"eof"``).  Said once per phase, so nobody mistakes it for a fault.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from llmload.loadtests.measure import overflow
from llmload.loadtests.measure.record import RequestRecord
from llmload.reports import saturation

BURST_GAP_S = 0.002
BURST_SHARE = 0.8
MIN_EVENTS = 4
HELD_SHARE = 0.25
MIN_LAG_S = 0.01
TTFT_E2E_SHARE = 0.8
FLAG_SHARE = 0.5
MIN_REQUESTS = 3
MISMATCH_FLAG_RATE = 0.5
MISMATCH_TOLERANCE = 0.1
STUTTER_MIN_GAPS = 8
STUTTER_CLUMP_SHARE = 0.2
STALL_MIN_S = 0.05
STALL_FACTOR = 5.0
BURST_RUN = 3
STUTTER_FLAG_SHARE = 0.25
NEW_CONNECTION_SHARE = 0.8

BUFFERING_HINT = (
    "A proxy between the client and the server is buffering the event stream. In nginx, "
    "set `proxy_buffering off;` in the location that proxies the model server (or let the "
    "server send the `X-Accel-Buffering: no` response header, and make sure nginx does not "
    "list it in `proxy_ignore_headers`); unbuffered proxying also flushes a `gzip` filter "
    "that would otherwise hold the stream until it ends. For other proxies and CDNs, disable "
    "response buffering and compression for `text/event-stream`. (A load generator starved "
    "of CPU reads in bursts "
    "too: check the run's harness health before blaming the proxy.)"
)
STUTTER_HINT = (
    "Tokens reach the client in clumps — a stall, then a burst — which users see as stutter. "
    "Something between the client and the model server holds tokens back and releases them "
    "together: an LLM gateway (LiteLLM proxy and the like) that re-chunks or does per-chunk "
    "work, a proxy buffering partially, or a starved component in the path. Run the same test "
    "straight at the model server: if its stream is smooth there, the path is the cause — "
    "check the gateway's streaming settings and CPU. (A load generator starved of CPU reads in "
    "bursts too: check the run's harness health first.)"
)
NO_SPLIT_NOTE = (
    "The responses carry no server timings (a gateway in between may strip the bundled "
    "server's `x_llmload`), so TTFT, ITL and E2E cannot be split into server time and path "
    "time (network, gateway, proxy): only their sum is known."
)
CONNECTION_HINT = (
    "Let clients keep their connections: enable HTTP keep-alive on the server or the proxy "
    "in front of it (nginx: `keepalive_timeout` for clients; `keepalive` in the upstream "
    'block with `proxy_http_version 1.1` and `proxy_set_header Connection ""`). Browsers '
    "and SDKs reuse connections whenever the server lets them, so this set-up is latency "
    "users pay only because of the server's configuration."
)
NO_DONE_HINT = (
    "Nothing to fix for the measurement: a stream that delivered its finish_reason and then "
    "ended cleanly is a complete answer. A stream cut before its finish_reason still counts "
    "as `disconnect`."
)
MISMATCH_HINT = (
    "Pass the served model's own tokenizer directory to `--tokenizer`; the server's `usage` "
    "is what the model generated, so `output_tokens` keeps using it."
)


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding about a phase."""

    code: str
    message: str
    hint: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def burst_share(record: RequestRecord) -> float | None:
    """Fraction of a record's inter-event gaps shorter than ``BURST_GAP_S`` (None: too few)."""
    if len(record.itl_s) < MIN_EVENTS - 1:
        return None
    return sum(g < BURST_GAP_S for g in record.itl_s) / len(record.itl_s)


def held_back(record: RequestRecord) -> bool | None:
    """Whether the first token reached the client much later than the server sent it."""
    if record.ttft_s is None or record.e2e_s is None:
        return None
    if record.server_ttft_s is not None and record.server_e2e_s is not None:
        span = record.server_e2e_s - record.server_ttft_s
        return record.ttft_s - record.server_ttft_s >= max(HELD_SHARE * span, MIN_LAG_S)
    return record.e2e_s > 0 and record.ttft_s >= TTFT_E2E_SHARE * record.e2e_s


def is_buffered(record: RequestRecord) -> bool | None:
    """A streamed response that arrived in bursts after being held back (None: cannot tell)."""
    share = burst_share(record)
    held = held_back(record)
    if share is None or held is None:
        return None
    return share >= BURST_SHARE and held


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def proxy_buffering(records: Sequence[RequestRecord]) -> Diagnostic | None:
    """The ``proxy_buffering`` diagnostic for a phase's records, or None."""
    judged = [
        (r, v)
        for r in records
        if r.ok and r.mode == "stream" and not r.warmup
        if (v := is_buffered(r)) is not None
    ]
    buffered = [r for r, v in judged if v]
    if len(judged) < MIN_REQUESTS or len(buffered) < FLAG_SHARE * len(judged):
        return None
    ratio = _median([(r.ttft_s or 0.0) / r.e2e_s for r in buffered if r.e2e_s])
    gaps = _median([s for r in buffered if (s := burst_share(r)) is not None])
    lag = _median(
        [r.ttft_s - r.server_ttft_s for r in buffered if r.ttft_s and r.server_ttft_s is not None]
    )
    evidence: dict[str, Any] = {
        "streamed_requests": len(judged),
        "buffered_requests": len(buffered),
        "buffered_share": len(buffered) / len(judged),
        "median_ttft_over_e2e": ratio,
        "median_burst_share": gaps,
        "burst_gap_ms": BURST_GAP_S * 1000,
        "median_client_minus_server_ttft_ms": None if lag is None else lag * 1000,
    }
    message = (
        f"{len(buffered)} of {len(judged)} streamed responses arrived in bursts: a median "
        f"{(gaps or 0.0):.0%} of their inter-event gaps were under {BURST_GAP_S * 1000:g} ms "
        f"and TTFT was {(ratio or 0.0):.0%} of e2e"
    )
    if lag is not None:
        message += f"; the client saw the first token {lag * 1000:.0f} ms after the server sent it"
    hint = f"{BUFFERING_HINT} {NO_SPLIT_NOTE}" if _no_server_timings(buffered) else BUFFERING_HINT
    return Diagnostic("proxy_buffering", message + ".", hint, evidence)


def stall_then_burst(gaps: Sequence[float]) -> float | None:
    """The longest stall that is followed at once by a burst (seconds), or None."""
    if len(gaps) < STUTTER_MIN_GAPS:
        return None
    floor = max(STALL_MIN_S, STALL_FACTOR * statistics.median(gaps))
    longest = None
    for i, gap in enumerate(gaps[: len(gaps) - BURST_RUN]):
        if gap >= floor and all(g < BURST_GAP_S for g in gaps[i + 1 : i + 1 + BURST_RUN]):
            longest = gap if longest is None else max(longest, gap)
    return longest


def stutters(record: RequestRecord) -> bool | None:
    """A streamed response whose tokens arrived in clumps after stalls (None: too few gaps)."""
    share = burst_share(record) if len(record.itl_s) >= STUTTER_MIN_GAPS else None
    if share is None:
        return None
    return share >= STUTTER_CLUMP_SHARE and stall_then_burst(record.itl_s) is not None


def _no_server_timings(records: Sequence[RequestRecord]) -> bool:
    return all(r.server_ttft_s is None and r.server_e2e_s is None for r in records)


def stream_stutter(records: Sequence[RequestRecord]) -> Diagnostic | None:
    """The ``stream_stutter`` diagnostic for a phase's records, or None."""
    judged = [
        (r, v)
        for r in records
        if r.ok and r.mode == "stream" and not r.warmup
        if (v := stutters(r)) is not None
    ]
    bad = [r for r, v in judged if v]
    if len(judged) < MIN_REQUESTS or len(bad) < STUTTER_FLAG_SHARE * len(judged):
        return None
    stalls = [s for r in bad if (s := stall_then_burst(r.itl_s)) is not None]
    clumped = _median([s for r in bad if (s := burst_share(r)) is not None]) or 0.0
    stall = _median(stalls) or 0.0
    hidden = _no_server_timings(bad)
    evidence: dict[str, Any] = {
        "streamed_requests": len(judged),
        "stuttering_requests": len(bad),
        "median_clumped_share": clumped,
        "median_longest_stall_ms": stall * 1000,
        "burst_gap_ms": BURST_GAP_S * 1000,
        "server_timings": not hidden,
    }
    message = (
        f"{len(bad)} of {len(judged)} streamed responses stuttered: a median {clumped:.0%} of "
        f"their token gaps were under {BURST_GAP_S * 1000:g} ms, after stalls of a median "
        f"{stall * 1000:.0f} ms."
    )
    hint = f"{STUTTER_HINT} {NO_SPLIT_NOTE}" if hidden else STUTTER_HINT
    return Diagnostic("stream_stutter", message, hint, evidence)


def connection_per_request(records: Sequence[RequestRecord]) -> Diagnostic | None:
    """The ``connection_per_request`` diagnostic, or None."""
    by_user: dict[tuple[str, int | None], list[RequestRecord]] = {}
    for r in records:
        if r.ok and not r.warmup and r.user_id is not None:  # no user: no "after its first"
            by_user.setdefault((r.worker, r.user_id), []).append(r)
    later = [r for rs in by_user.values() for r in sorted(rs, key=lambda r: r.started_at)[1:]]
    opened = [r.connect_s for r in later if r.connect_s is not None]
    if len(later) < MIN_REQUESTS or len(opened) < NEW_CONNECTION_SHARE * len(later):
        return None
    setup = statistics.median(opened)
    ttft = _median([r.ttft_s for r in later if r.ttft_s is not None and r.connect_s is not None])
    evidence = {
        "judged_requests": len(later),
        "new_connections": len(opened),
        "median_connect_ms": setup * 1000,
        "median_ttft_ms": None if ttft is None else ttft * 1000,
    }
    message = (
        f"The target closed the connection after each response: {len(opened)} of {len(later)} "
        f"repeat requests opened a new one, and each TTFT includes its set-up (median "
        f"{setup * 1000:.1f} ms)."
    )
    return Diagnostic("connection_per_request", message, CONNECTION_HINT, evidence)


def no_done_marker(records: Sequence[RequestRecord]) -> Diagnostic | None:
    """The ``no_done_marker`` note when ok streams ended without ``data: [DONE]``, or None."""
    streams = [r for r in records if r.ok and r.mode == "stream" and r.stream_end is not None]
    eof = sum(r.stream_end == "eof" for r in streams)
    if not eof:
        return None
    message = (
        f"The server sends no [DONE]: {eof} of {len(streams)} streamed responses ended after "
        "their finish_reason with a clean end of body, and counted as ok."
    )
    evidence = {"streamed_requests": len(streams), "ended_without_done": eof}
    return Diagnostic("no_done_marker", message, NO_DONE_HINT, evidence)


def _tokenizer_disagrees(r: RequestRecord) -> bool:
    """A real disagreement: beyond tolerance, and not just the content-event count.

    Without ``--tokenizer`` the timing core's client count is the number of
    content events; a server that packs several tokens into one event differs
    from its usage for that reason alone, which is not a tokenizer problem.
    """
    usage, client = r.usage_output_tokens or 0, r.client_output_tokens or 0
    events = len(r.itl_s) + 1 if r.mode == "stream" and r.ttft_s is not None else None
    return abs(client - usage) > max(1.0, MISMATCH_TOLERANCE * usage) and client != events


def token_count_mismatch(records: Sequence[RequestRecord]) -> Diagnostic | None:
    """The ``token_count_mismatch`` diagnostic, or None."""
    both = [
        r
        for r in records
        if r.ok and r.usage_output_tokens is not None and r.client_output_tokens is not None
        # usage counts a call's markup, which no client sees as text; an answer with no
        # visible output is counted on its own (``reports.answers``)
        if not r.tool_calls and not r.no_output
    ]
    bad = [r for r in both if _tokenizer_disagrees(r)]
    if len(both) < MIN_REQUESTS or len(bad) < MISMATCH_FLAG_RATE * len(both):
        return None
    diffs = [(r.client_output_tokens or 0) - (r.usage_output_tokens or 0) for r in bad]
    evidence = {
        "compared": len(both),
        "mismatched": len(bad),
        "rate": len(bad) / len(both),
        "median_client_minus_usage_tokens": statistics.median(diffs),
    }
    message = (
        f"The client tokenizer's count differs from the server's usage on {len(bad)} of "
        f"{len(both)} responses (median difference {statistics.median(diffs):+g} tokens)."
    )
    return Diagnostic("token_count_mismatch", message, MISMATCH_HINT, evidence)


def context_overflow(records: Sequence[RequestRecord]) -> Diagnostic | None:
    """The ``context_overflow`` diagnostic when requests exceeded the target's context."""
    over = [r for r in records if r.status == "context_overflow"]
    if not over:
        return None
    message = (
        f"{len(over)} of {len(records)} requests exceeded the target's context length "
        f"(HTTP {over[0].http_status}: {over[0].error})"
    )
    evidence = {"requests": len(records), "context_overflow": len(over)}
    return Diagnostic("context_overflow", message, overflow.HINT, evidence)


def detect(
    records: Sequence[RequestRecord], phase: str | Mapping[str, Any] | None = None
) -> list[Diagnostic]:
    """Every diagnostic that applies to one phase's records.

    ``phase`` is the phase's mode ("stream"/"sync") or its summary dict (its
    ``mode`` is used); None judges each record by its own mode.
    """
    mode = phase.get("mode") if isinstance(phase, Mapping) else phase
    found: list[Diagnostic | None] = []
    if mode != "sync":
        buffering = proxy_buffering(records)
        found.append(buffering)
        if buffering is None:
            found.append(stream_stutter(records))
        found.append(no_done_marker(records))
    found.append(connection_per_request(records))
    found.append(token_count_mismatch(records))
    found.append(context_overflow(records))
    saturated = saturation.target_saturated(records)
    if saturated is not None:
        found.append(Diagnostic("target_saturated", *saturated))
    return [d for d in found if d is not None]
