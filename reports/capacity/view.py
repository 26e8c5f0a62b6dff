"""The capacity section of ``summary.md``, ``report.html`` and the terminal (pure renderers).

Input: ``Summary.capacity`` (``reports.capacity.curve.capacity_summary``, a mapping).  The
curve — TTFT p50/p95, TPOT p50/p95, throughput and error rate against load —
with the capacity bracket and the knee marked.  A search over agent sessions adds
the time to each session's final answer; one over a trace's pace (or sessions per
second) shows each step's load with the requests per second it sent.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

from llmload.reports.capacity.curve import SPEEDUP, client_note, is_open_loop, load_text
from llmload.reports.draw.charts import Axes, Series, render
from llmload.reports.draw.fmt import fmt_ms, fmt_num, fmt_rate, table
from llmload.reports.table.schema import Summary

#: a search over agent sessions: after the E2E column
SESSION_HEADER = "session p50 / p95 (ms)"
#: a search with a GPU exporter (``--gpu-metrics``): after the out tok/s column
ENERGY_HEADER = "out tok/J (GPU)"

#: a column: its header and its cell of one curve point
Column = tuple[str, Callable[[dict[str, Any]], str]]


def columns(cap: dict[str, Any]) -> list[Column]:
    """The table's columns, each declared once with its cell: TTFT, TPOT and tokens for a
    streaming search (a session column when the steps ran agent sessions, a tokens per
    joule column when the GPUs were scraped); E2E and inputs/s for a search over a
    protocol without streams (embeddings, rerank: no token to time)."""
    unit = cap.get("unit") or ""
    out: list[Column] = [("load", lambda p: _load_cell(p, unit)), ("verdict", _verdict_cell)]
    if _pooled(cap):
        out += [
            ("E2E p50 / p95 (ms)", lambda p: _pair(p["e2e_ms"])),
            ("throughput (req/s)", lambda p: fmt_rate(p["throughput_per_s"])),
            ("inputs/s", lambda p: fmt_rate(p.get("inputs_per_s"))),
        ]
    else:
        out += [
            ("TTFT p50 / p95 (ms)", lambda p: _pair(p["ttft_ms"])),
            ("TPOT p50 / p95 (ms)", lambda p: _pair(p["tpot_ms"])),
            ("E2E p95 (ms)", lambda p: fmt_ms(p["e2e_ms"].get("p95"))),
        ]
        if _has_sessions(cap):
            out.append((SESSION_HEADER, lambda p: _session_cell(p.get("sessions"))))
        out += [
            ("throughput (req/s)", lambda p: fmt_rate(p["throughput_per_s"])),
            ("out tok/s", lambda p: fmt_rate(p["output_tokens_per_s"])),
        ]
        if _has_energy(cap):
            out.append((ENERGY_HEADER, lambda p: fmt_num(p.get("output_tokens_per_joule"))))
    return out + [
        ("errors", lambda p: f"{p['error_rate']:.1%}"),
        ("SLO ratio", lambda p: "–" if p.get("ratio") is None else f"{p['ratio']:.2f}"),
        ("notes", lambda p: "; ".join(_notes(cap, p))),
    ]


def header(cap: dict[str, Any]) -> list[str]:
    """The table's column headers (``columns``)."""
    return [name for name, _ in columns(cap)]


def _has_energy(cap: dict[str, Any]) -> bool:
    return any(p.get("output_tokens_per_joule") is not None for p in cap["curve"])


def _has_sessions(cap: dict[str, Any]) -> bool:
    return any(p.get("sessions") for p in cap["curve"])


def _pooled(cap: dict[str, Any]) -> bool:
    """The steps sent embeddings or rerank requests (``inputs_per_s`` on their points)."""
    return any(p.get("inputs_per_s") is not None for p in cap["curve"])


def _load_cell(p: dict[str, Any], unit: str) -> str:
    """``8 users``; a trace's pace or sessions per second with the requests/s they sent."""
    text = load_text(p["load"], unit)
    if unit in (SPEEDUP, "sessions/s") and p.get("sent_per_s") is not None:
        text += f" ({p['sent_per_s']:.3g} req/s sent)"
    return text


def _pair(d: dict[str, Any]) -> str:
    return f"{fmt_ms(d.get('p50'))} / {fmt_ms(d.get('p95'))}"


def _marks(cap: dict[str, Any], p: dict[str, Any]) -> list[str]:
    ans = cap.get("answer") or {}
    load, verdict = p["load"], p.get("search_verdict") or p["verdict"]
    out = []
    if load == ans.get("lo") and verdict == "pass":
        out.append("sustained (capacity)")
    if load == ans.get("hi") and verdict == "fail":
        out.append("first not sustained")
    if load == cap.get("knee") and verdict != "unreliable":
        out.append("knee")
    return out


def _starved_note(p: dict[str, Any]) -> str:
    verdict = p.get("search_verdict") or p["verdict"]
    if verdict == "unreliable":
        return "load generator starved: this failure is not evidence about the server"
    if verdict == "pass":
        return "load generator starved (a pass still counts: it only adds delay)"
    return "load generator starved, but the failure exceeds its worst lag"


def curve_points(cap: dict[str, Any]) -> list[dict[str, Any]]:
    """One point per load for the charts: the last step there that is evidence."""
    by_load: dict[float, dict[str, Any]] = {}
    for p in cap["curve"]:
        if (p.get("search_verdict") or p["verdict"]) != "unreliable":
            by_load[p["load"]] = p
    return [by_load[x] for x in sorted(by_load)]


def rows(cap: dict[str, Any]) -> list[list[str]]:
    """One row per step, in load order (``columns``)."""
    cols = columns(cap)
    steps = sorted(cap["curve"], key=lambda p: (p["load"], p.get("phase") or ""))
    return [[cell(p) for _, cell in cols] for p in steps]


def _verdict_cell(p: dict[str, Any]) -> str:
    verdict = p.get("search_verdict") or p["verdict"]
    return verdict + " (uncertain)" if p["verdict"] == "uncertain" else verdict


def _notes(cap: dict[str, Any], p: dict[str, Any]) -> list[str]:
    """A step's notes: the answer's marks, saturation, a plateau, pooling, the client."""
    notes = _marks(cap, p) + list(p.get("saturated") or [])
    if p.get("plateau"):
        notes.append(p["plateau"])
    if p.get("pooled_with"):
        notes.append(f"too close to call alone: judged with {', '.join(p['pooled_with'])}")
    behind = p.get("client_behind")
    if behind:  # what the step counts for: said once, by the starved note when starved
        verdict = p.get("search_verdict") or p["verdict"]
        notes.append(behind["text"] + ("" if p.get("starved") else client_note(verdict)))
    if p.get("starved"):
        notes.append(_starved_note(p))
    return notes


def _session_cell(s: dict[str, Any] | None) -> str:
    """Time to the final answer, p50 / p95, and how many sessions reached it."""
    if not s:
        return "–"
    return f"{_pair(s['session_ms'])} ({s['complete']} of {s['sessions']} complete)"


def _how(cap: dict[str, Any]) -> str:
    elapsed = cap.get("elapsed_s") or 0.0
    unit = cap.get("unit")
    if unit == SPEEDUP:
        basis = (
            "each step replays the trace from its window's start at its speedup, in laps "
            "when the step outlasts the window; latency from the intended send time (open loop)"
        )
    elif is_open_loop(cap):
        what = "agent sessions per second, " if unit == "sessions/s" else ""
        basis = f"{what}latency from the intended send time (open loop)"
    else:
        basis = "back-to-back users (closed loop)"
    if _has_sessions(cap):
        basis += (
            "; the SLO is judged on every request of the sessions, and a session's time runs "
            "from its first request to its final answer"
        )
    return (
        f"{cap.get('search')}: {cap['steps']} steps in {elapsed:.0f} s "
        f"(budget {cap.get('budget_s') or 0:.0f} s, tolerance {cap.get('tolerance', 0):.0%}); "
        f"each step judged at {cap.get('confidence', 0.95):.0%} confidence "
        f"(exact binomial test on the share within bounds); {basis}. "
        f"SLO ratio: the observed percentile over its bound (1 = at the limit)."
    )


def capacity_markdown(summary: Summary) -> str:
    """The ``## Capacity`` section ('' when the run was not a capacity search)."""
    cap = summary.capacity
    if not cap:
        return ""
    behind = behind_text(cap)
    return "\n\n".join(
        [
            "## Capacity",
            f"**{cap['text']}**",
            *([f"Note: {behind}."] if behind else []),
            _how(cap),
            table(header(cap), rows(cap)),
        ]
    )


def capacity_terminal(summary: Summary) -> list[str]:
    cap = summary.capacity
    if not cap:
        return []
    out = [f"capacity: {cap['text']} ({cap['steps']} steps, {cap.get('elapsed_s') or 0:.0f} s)"]
    behind = behind_text(cap)
    if behind:
        out.append(f"capacity: {behind}")
    return out


def behind_text(cap: dict[str, Any]) -> str:
    """'' or, when the load generator fell behind its own schedule in some steps, which ones
    and by how much: their late sends were not counted as the target's queueing."""
    steps = [p for p in cap["curve"] if p.get("client_behind")]
    if not steps:
        return ""
    unit = cap.get("unit") or ""
    worst = max(steps, key=lambda p: p["client_behind"]["schedule_delay_ms_p95"])
    lags = [p["client_behind"]["lag_ms"] for p in steps if p["client_behind"].get("lag_ms")]
    lag = f" with its event loop lagging up to {max(lags):.0f} ms (p99)" if lags else ""
    at = ", ".join(dict.fromkeys(load_text(p["load"], unit) for p in steps))
    worst_ms = worst["client_behind"]["schedule_delay_ms_p95"]
    return (
        f"the load generator itself fell behind its schedule at {at}: sends up to "
        f"{worst_ms:.0f} ms late (p95){lag}, not counted as the target's queueing"
    )


def _vline(x: float, y_max: float, name: str, color: str) -> Series:
    return Series(name, [(x, 0.0), (x, y_max)], color=color, dashed=True)


def charts(cap: dict[str, Any]) -> list[Axes]:
    """Latency against load and throughput/errors against load, capacity and knee marked."""
    pts = curve_points(cap)
    unit = cap.get("unit") or "load"

    def line(name: str, get: Any) -> Series:
        return Series(name, [(p["load"], v) for p in pts if (v := get(p)) is not None])

    ttft = "TTFT from intended send" if is_open_loop(cap) else "TTFT"
    lat = [
        line(f"{ttft} p50", lambda p: p["ttft_ms"].get("p50")),
        line(f"{ttft} p95", lambda p: p["ttft_ms"].get("p95")),
        line("TPOT p50", lambda p: p["tpot_ms"].get("p50")),
        line("TPOT p95", lambda p: p["tpot_ms"].get("p95")),
    ]
    if _pooled(cap):  # no token: the whole response's latency
        lat = [
            line("E2E p50", lambda p: p["e2e_ms"].get("p50")),
            line("E2E p95", lambda p: p["e2e_ms"].get("p95")),
        ]
    lat = [s for s in lat if s.points]
    for s in lat:
        s.kind = "line"
    top = max((y for s in lat for _, y in s.points), default=1.0)
    ans = cap.get("answer") or {}
    marks = []
    if ans.get("estimate") is not None:
        marks.append(_vline(ans["estimate"], top, "capacity", "#2ca02c"))
    if cap.get("knee") is not None:
        marks.append(_vline(cap["knee"], top, "knee", "#7f7f7f"))
    tput = [
        line("throughput (req/s)", lambda p: p["throughput_per_s"]),
        line("inputs/s", lambda p: p.get("inputs_per_s")),
        line("errors (% of requests)", lambda p: 100.0 * p["error_rate"]),
    ]
    tput = [s for s in tput if s.points]
    ttop = max((y for s in tput for _, y in s.points), default=1.0)
    tmarks = [_vline(m.points[0][0], ttop, m.name, m.color) for m in marks]
    return [
        Axes(
            "Latency against load",
            unit,
            "ms",
            "chart-capacity-latency",
            lat + marks,
            note="Dashed: the capacity estimate and the knee (where the SLO ratio curve bends "
            "most). Steps in which a starved load generator failed are left out.",
        ),
        Axes(
            "Throughput and errors against load",
            unit,
            "req/s · inputs/s · % errors" if _pooled(cap) else "req/s · % errors",
            "chart-capacity-throughput",
            tput + tmarks,
        ),
    ]


def capacity_html(summary: Summary) -> str:
    """The capacity ``<h2>`` section of ``report.html`` ('' when not a capacity run)."""
    cap = summary.capacity
    if not cap:
        return ""
    head = "".join(f"<th>{escape(h)}</th>" for h in header(cap))
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows(cap)
    )
    figs = "".join(render(ax) for ax in charts(cap))
    behind = behind_text(cap)
    note = f'<p class="note">Note: {escape(behind)}.</p>' if behind else ""
    return (
        f'<h2 id="capacity">Capacity</h2><p style="font-size:17px"><b>{escape(cap["text"])}</b>'
        f'</p>{note}<p class="note">{escape(_how(cap))}</p>'
        f'<div class="grid2">{figs}</div>'
        f'<div id="capacity-table"><table><tr>{head}</tr>{body}</table></div>'
    )
