"""Diagnostics: problems a phase's records reveal on their own (pure functions).

``detect(records, phase)`` returns ``Diagnostic``s, each with a stable ``code``,
a plain-language ``message``, a ``hint`` (what to change) and the ``evidence``
numbers.  ``reports.summary.make`` puts them in the phase's ``diagnostics`` list.

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

``target_saturated``: the target could not keep up (``reports.table.queue_growth``).

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

import numpy as np

from llmload.loadtests.measure import overflow
from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.table import queue_growth
from llmload.reports.table.columns import RecordTable

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


# -- the per-record rules (module docstring), decided for a whole phase at once ---------


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


class _Facts:
    """The per-record rules over a table of records, as arrays (NaN: cannot tell).

    Each record's decision (buffered, stutters) taken for a million records at
    once: burst shares from each record's count of short gaps, stalls looked for
    only where a long gap is followed by a burst (``stall_then_burst`` judges those).
    """

    def __init__(self, t: RecordTable) -> None:
        self.t = t
        self.counts = t.itl_counts()

    def burst_share(self, min_gaps: int = MIN_EVENTS - 1) -> np.ndarray:
        counts = self.counts
        share = np.full(len(counts), np.nan)
        enough = counts >= max(min_gaps, 1)
        share[enough] = self.t.gaps_below(BURST_GAP_S)[enough] / counts[enough]
        return share

    def held_back(self) -> np.ndarray:
        num = self.t.num
        ttft, e2e = num("ttft_s"), num("e2e_s")
        s_ttft, s_e2e = num("server_ttft_s"), num("server_e2e_s")
        server = ~np.isnan(s_ttft) & ~np.isnan(s_e2e)
        with np.errstate(invalid="ignore"):
            by_server = ttft - s_ttft >= np.maximum(HELD_SHARE * (s_e2e - s_ttft), MIN_LAG_S)
            by_client = (e2e > 0) & (ttft >= TTFT_E2E_SHARE * e2e)
        held = np.where(server, by_server, by_client).astype(float)
        held[np.isnan(ttft) | np.isnan(e2e)] = np.nan
        return held

    def buffered(self) -> np.ndarray:
        share, held = self.burst_share(), self.held_back()
        out = ((share >= BURST_SHARE) & (held == 1)).astype(float)
        out[np.isnan(share) | np.isnan(held)] = np.nan
        return out

    def stalls(self) -> np.ndarray:
        """``stall_then_burst`` of each record (NaN: none, or too few gaps).

        Candidates are found over the store's flat gaps from this table's first record
        to its last (a view, no copy): a long gap followed by ``BURST_RUN`` short ones
        within its record; only records with one are judged gap by gap."""
        t, counts = self.t, self.counts
        out = np.full(len(t), np.nan)
        judged = counts >= STUTTER_MIN_GAPS
        if not judged.any():
            return out
        gaps, base = t.gap_span()
        n = len(gaps)
        cand = gaps >= STALL_MIN_S
        if n > BURST_RUN:
            for k in range(1, BURST_RUN + 1):
                cand[: n - BURST_RUN] &= gaps[k : n - BURST_RUN + k] < BURST_GAP_S
        cand[max(n - BURST_RUN, 0) :] = False
        positions = np.flatnonzero(cand) + base
        del cand
        if not len(positions):
            return out
        rows, within = t.gap_positions(positions)
        where = np.searchsorted(t.rows, rows)
        where = np.minimum(where, len(t.rows) - 1)
        mine = t.rows[where] == rows  # the gap's record is in this table
        inside = mine & (within < counts[where] - BURST_RUN)
        for i in np.unique(where[inside]).tolist():
            if judged[i]:
                out[i] = stall_then_burst(t.gaps_of(i).tolist()) or np.nan
        return out

    def stutters(self) -> np.ndarray:
        share = self.burst_share(STUTTER_MIN_GAPS)
        out = np.where(np.isnan(share), np.nan, 0.0)
        clumped = share >= STUTTER_CLUMP_SHARE
        if clumped.any():
            stalls = self.stalls()
            out[clumped & ~np.isnan(stalls)] = 1.0
        return out


def _median(values: list[float] | np.ndarray) -> float | None:
    values = values.tolist() if isinstance(values, np.ndarray) else values
    return statistics.median(values) if values else None


def _streamed(t: RecordTable) -> np.ndarray:
    """Mask: ok streamed records, not warm-up ones."""
    return t.ok() & t.is_("mode", "stream") & ~t.warmup_field()


def proxy_buffering(records: Sequence[RequestRecord]) -> Diagnostic | None:
    """The ``proxy_buffering`` diagnostic for a phase's records, or None."""
    t = RecordTable.of(records)
    facts = _Facts(t)
    value = facts.buffered()
    judged = _streamed(t) & ~np.isnan(value)
    buffered = judged & (value == 1)
    n_judged, n_buffered = int(judged.sum()), int(buffered.sum())
    if n_judged < MIN_REQUESTS or n_buffered < FLAG_SHARE * n_judged:
        return None
    ttft, e2e, s_ttft = t.num("ttft_s")[buffered], t.num("e2e_s")[buffered], t.num("server_ttft_s")
    s_ttft = s_ttft[buffered]
    has_e2e = (e2e != 0) & ~np.isnan(e2e)
    ratio = _median(np.nan_to_num(ttft[has_e2e], nan=0.0) / e2e[has_e2e])
    gaps = _median(facts.burst_share()[buffered])
    lagged = (ttft != 0) & ~np.isnan(ttft) & ~np.isnan(s_ttft)
    lag = _median(ttft[lagged] - s_ttft[lagged])
    evidence: dict[str, Any] = {
        "streamed_requests": n_judged,
        "buffered_requests": n_buffered,
        "buffered_share": n_buffered / n_judged,
        "median_ttft_over_e2e": ratio,
        "median_burst_share": gaps,
        "burst_gap_ms": BURST_GAP_S * 1000,
        "median_client_minus_server_ttft_ms": None if lag is None else lag * 1000,
    }
    message = (
        f"{n_buffered} of {n_judged} streamed responses arrived in bursts: a median "
        f"{(gaps or 0.0):.0%} of their inter-event gaps were under {BURST_GAP_S * 1000:g} ms "
        f"and TTFT was {(ratio or 0.0):.0%} of e2e"
    )
    if lag is not None:
        message += f"; the client saw the first token {lag * 1000:.0f} ms after the server sent it"
    hidden = _no_server_timings(t.where(buffered))
    hint = f"{BUFFERING_HINT} {NO_SPLIT_NOTE}" if hidden else BUFFERING_HINT
    return Diagnostic("proxy_buffering", message + ".", hint, evidence)


def _no_server_timings(t: RecordTable) -> bool:
    return bool(np.isnan(t.num("server_ttft_s")).all() and np.isnan(t.num("server_e2e_s")).all())


def stream_stutter(records: Sequence[RequestRecord]) -> Diagnostic | None:
    """The ``stream_stutter`` diagnostic for a phase's records, or None."""
    t = RecordTable.of(records)
    facts = _Facts(t)
    value = facts.stutters()
    judged = _streamed(t) & ~np.isnan(value)
    bad = judged & (value == 1)
    n_judged, n_bad = int(judged.sum()), int(bad.sum())
    if n_judged < MIN_REQUESTS or n_bad < STUTTER_FLAG_SHARE * n_judged:
        return None
    stalls = facts.stalls()[bad]
    clumped = _median(facts.burst_share()[bad]) or 0.0
    stall = _median(stalls[~np.isnan(stalls)]) or 0.0
    hidden = _no_server_timings(t.where(bad))
    evidence: dict[str, Any] = {
        "streamed_requests": n_judged,
        "stuttering_requests": n_bad,
        "median_clumped_share": clumped,
        "median_longest_stall_ms": stall * 1000,
        "burst_gap_ms": BURST_GAP_S * 1000,
        "server_timings": not hidden,
    }
    message = (
        f"{n_bad} of {n_judged} streamed responses stuttered: a median {clumped:.0%} of "
        f"their token gaps were under {BURST_GAP_S * 1000:g} ms, after stalls of a median "
        f"{stall * 1000:.0f} ms."
    )
    hint = f"{STUTTER_HINT} {NO_SPLIT_NOTE}" if hidden else STUTTER_HINT
    return Diagnostic("stream_stutter", message, hint, evidence)


def connection_per_request(records: Sequence[RequestRecord]) -> Diagnostic | None:
    """The ``connection_per_request`` diagnostic, or None."""
    t = RecordTable.of(records)
    user = t.num("user_id")
    keep = t.ok() & ~t.warmup_field() & ~np.isnan(user)  # no user: no "after its first"
    index = np.flatnonzero(keep)
    worker, user, started = t.codes("worker")[keep], user[keep], t.num("started_at")[keep]
    order = np.lexsort((started, user, worker))  # stable: ties keep the records' order
    w, u = worker[order], user[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (w[1:] != w[:-1]) | (u[1:] != u[:-1])
    later = index[order[~first]]
    connect = t.num("connect_s")[later]
    opened = connect[~np.isnan(connect)]
    if len(later) < MIN_REQUESTS or len(opened) < NEW_CONNECTION_SHARE * len(later):
        return None
    setup = statistics.median(opened.tolist())
    ttfts = t.num("ttft_s")[later]
    ttft = _median(ttfts[~np.isnan(ttfts) & ~np.isnan(connect)])
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
    t = RecordTable.of(records)
    streams = t.ok() & t.is_("mode", "stream") & ~t.is_("stream_end", None)
    eof = int((streams & t.is_("stream_end", "eof")).sum())
    if not eof:
        return None
    n = int(streams.sum())
    message = (
        f"The server sends no [DONE]: {eof} of {n} streamed responses ended after "
        "their finish_reason with a clean end of body, and counted as ok."
    )
    evidence = {"streamed_requests": n, "ended_without_done": eof}
    return Diagnostic("no_done_marker", message, NO_DONE_HINT, evidence)


def token_count_mismatch(records: Sequence[RequestRecord]) -> Diagnostic | None:
    """The ``token_count_mismatch`` diagnostic, or None.

    A real disagreement is beyond tolerance and not just the content-event count:
    without ``--tokenizer`` the timing core's client count is the number of content
    events, and a server that packs several tokens into one event differs from its
    usage for that reason alone, which is not a tokenizer problem.
    """
    t = RecordTable.of(records)
    usage, client = t.num("usage_output_tokens"), t.num("client_output_tokens")
    # usage counts a call's markup, which no client sees as text; an answer with no
    # visible output is counted on its own (``reports.table.answers``)
    both = t.ok() & ~np.isnan(usage) & ~np.isnan(client)
    both &= (t.num("tool_calls") == 0) & ~t.flag("no_output")
    events = np.where(
        t.is_("mode", "stream") & ~np.isnan(t.num("ttft_s")), t.itl_counts() + 1.0, np.nan
    )
    off = np.abs(client - usage) > np.maximum(1.0, MISMATCH_TOLERANCE * usage)
    bad = both & off & (client != events)  # (NaN events: never equal)
    n_both, n_bad = int(both.sum()), int(bad.sum())
    if n_both < MIN_REQUESTS or n_bad < MISMATCH_FLAG_RATE * n_both:
        return None
    diffs = [int(d) if d.is_integer() else d for d in (client[bad] - usage[bad]).tolist()]
    evidence = {
        "compared": n_both,
        "mismatched": n_bad,
        "rate": n_bad / n_both,
        "median_client_minus_usage_tokens": statistics.median(diffs),
    }
    message = (
        f"The client tokenizer's count differs from the server's usage on {n_bad} of "
        f"{n_both} responses (median difference {statistics.median(diffs):+g} tokens)."
    )
    return Diagnostic("token_count_mismatch", message, MISMATCH_HINT, evidence)


def context_overflow(records: Sequence[RequestRecord]) -> Diagnostic | None:
    """The ``context_overflow`` diagnostic when requests exceeded the target's context."""
    t = RecordTable.of(records)
    over = t.where(t.is_("status", "context_overflow"))
    if not len(over):
        return None
    first = over[0]
    message = (
        f"{len(over)} of {len(t)} requests exceeded the target's context length "
        f"(HTTP {first.http_status}: {first.error})"
    )
    evidence = {"requests": len(t), "context_overflow": len(over)}
    return Diagnostic("context_overflow", message, overflow.HINT, evidence)


def detect(
    records: Sequence[RequestRecord], phase: str | Mapping[str, Any] | None = None
) -> list[Diagnostic]:
    """Every diagnostic that applies to one phase's records.

    ``phase`` is the phase's mode ("stream"/"sync") or its summary dict (its
    ``mode`` is used); None judges each record by its own mode.
    """
    mode = phase.get("mode") if isinstance(phase, Mapping) else phase
    records = RecordTable.of(records)
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
    saturated = queue_growth.target_saturated(records)
    if saturated is not None:
        found.append(Diagnostic("target_saturated", *saturated))
    return [d for d in found if d is not None]
