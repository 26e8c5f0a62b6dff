"""Can I trust these numbers?  Harness health, token counts, client − server TTFT, lost records.

Pure functions over ``run.json``'s phases and ``summary.json``: the report's
trust box (``assess``), the harness line of each phase (``harness_text``) and
the gate's question "may the load generator have caused this?" (``starved``).

Levels: ``green`` (nothing to doubt), ``amber`` (read with care), ``red`` (the
numbers are not what the target did), ``n/a`` (the check does not apply).
Thresholds are constants below; each item says its reason with the numbers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from llmload.loadtests.run.healthlog import NOT_LOAD, STARVED_SHARE, is_starved
from llmload.reports.table.schema import Summary

GREEN, AMBER, RED, NA = "green", "amber", "red", "n/a"
_RANK = {NA: 0, GREEN: 1, AMBER: 2, RED: 3}
#: token counts: share of requests where server usage and the client's count differ
TOKENS_AMBER, TOKENS_RED = 0.01, 0.05
#: client − server TTFT p95: green within max(ms, share of TTFT p50), red beyond the second
GAP_GREEN = (10.0, 0.05)
GAP_RED = (50.0, 0.20)
#: a starved load generator is red when its own possible delay (loop lag p99) is more than
#: max(ms, share of the phase's TTFT p50); below that it is amber: starved by the rule, yet too
#: little to move the figures (30 ms of lag beside a 941 ms sync TTFT)
HARNESS_RED = (10.0, 0.10)
#: the send side (t0 → last byte written) p99, what a late loop can still add to a time counted
#: from t0: green within max(ms, share of the phase's TTFT p50); red beyond ``HARNESS_RED``
SEND_GREEN = (5.0, 0.02)
#: open loop: schedule delay p95 (ms)
DELAY_AMBER_MS, DELAY_RED_MS = 10.0, 50.0
#: share of ok responses with no visible output: any is amber, this much is red
NO_OUTPUT_RED = 0.10
#: the host's CPU steal (mean % over a phase) from which the machine is named as a cause
STEAL_AMBER_PCT = 2.0


@dataclass(frozen=True)
class TrustItem:
    """One line of the trust box."""

    check: str
    level: str
    reason: str


def worst(levels: list[str]) -> str:
    """The most serious level (``n/a`` when there is nothing)."""
    return max(levels, key=_RANK.__getitem__, default=NA)


# -- harness health ------------------------------------------------------------


def phase_health(meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{phase: health block}`` from run.json (phases without samples left out)."""
    out: dict[str, dict[str, Any]] = {}
    for ph in meta.get("phases") or []:
        if isinstance(ph, dict) and isinstance(ph.get("health"), dict):
            out[str(ph.get("name"))] = ph["health"]
    return out


def _load_procs(health: dict[str, Any]) -> dict[str, dict[str, Any]]:
    procs = health.get("processes") or {}
    return {k: v for k, v in procs.items() if k not in NOT_LOAD and v.get("samples")}


def numbers_text(proc: dict[str, Any]) -> str:
    """``CPU p50 45% max 100%, loop lag p99 80 ms max 120 ms, 40% of samples above the line``."""
    return (
        f"CPU p50 {proc['cpu_p50']:.0f}% max {proc['cpu_max']:.0f}%, "
        f"loop lag p99 {proc['lag_p99_ms']:.0f} ms max {proc['lag_max_ms']:.0f} ms, "
        f"{proc['saturated_share']:.0%} of samples above the line"
    )


def harness_text(health: dict[str, Any]) -> str:
    """One phase's harness health in words (its busiest load process, named when several)."""
    procs = _load_procs(health)
    if not procs:
        return "not sampled"
    name, proc = max(procs.items(), key=lambda kv: (kv[1]["saturated_share"], kv[1]["cpu_max"]))
    who = f"{name}: " if len(procs) > 1 else ""
    return who + numbers_text(proc)


def starved(health: dict[str, Any], share: float = STARVED_SHARE, phase: str = "") -> str | None:
    """Why the phase's load generator was starved, or None when it was not."""
    hungry = {k: v for k, v in _load_procs(health).items() if is_starved(v, share)}
    if not hungry:
        return None
    name, proc = max(hungry.items(), key=lambda kv: kv[1]["saturated_share"])
    line = health.get("line") or {}
    who = f"{name}" + (f" and {len(hungry) - 1} more" if len(hungry) > 1 else "")
    return (
        f"the load generator was starved{f' in phase {phase}' if phase else ''} "
        f"({who}: {numbers_text(proc)}; line "
        f"CPU {line.get('cpu_percent', 90):g}% or loop lag {line.get('loop_lag_ms', 20):g} ms)"
    )


def harness_delay_ms(health: dict[str, Any]) -> float:
    """The most the client itself may have added to a latency in the phase: loop lag p99."""
    return max((float(p["lag_p99_ms"]) for p in _load_procs(health).values()), default=0.0)


# -- the box -------------------------------------------------------------------


def _evidence_item(summary: Summary, healths: dict[str, dict[str, Any]]) -> TrustItem:
    """Judged by what the client's delay can still reach: each request's send side.

    Reads are timed by the kernel's receive stamps, so event-loop lag no longer delays
    a measured arrival; what it can still add to a time counted from t0 is the send
    side (t0 → the request's last byte written, connection set-up included), measured
    per request.  Loop lag is shown as context.
    """
    levels, texts = [], []
    for name, g in summary.phases.items():
        send = g.dist("send_ms")
        if not send.n or send.p99 is None:
            continue
        ttft = g.dist("ttft_ms").p50 or 0.0
        green = max(SEND_GREEN[0], SEND_GREEN[1] * ttft)
        red = max(HARNESS_RED[0], HARNESS_RED[1] * ttft)
        levels.append(RED if send.p99 > red else AMBER if send.p99 > green else GREEN)
        conn = g.dist("connect_ms")
        setup = f", connection set-up p95 {conn.p95:.1f} ms ({conn.n})" if conn.p95 else ""
        lag = f"; loop lag as context: {harness_text(healths[name])}" if name in healths else ""
        texts.append(
            f"{name}: send side (t0 → last byte written) p99 {send.p99:.1f} ms over "
            f"{send.n} requests{setup}{lag}"
        )
    notes = {
        GREEN: " — reads are stamped by the kernel: loop lag no longer delays a measured "
        "arrival, and the send side is all it can still add",
        AMBER: " — the client's send side is a visible part of TTFT",
        RED: " — the client's own send side is more than the figures can absorb",
    }
    return _judged_item("harness health", levels, texts, notes, summary)


def _judged_item(
    check: str, levels: list[str], texts: list[str], notes: dict[str, str], summary: Summary
) -> TrustItem:
    """The worst of per-phase ``levels``, the phases' ``texts`` and that level's note (amber and
    red also say when the bundled server shared the load generator's cores)."""
    level = worst(levels)
    note = notes.get(level, "")
    if level in (AMBER, RED):
        note += _bundled_note(summary)
    return TrustItem(check, level, "; ".join(texts) + note)


def _harness_item(summary: Summary) -> TrustItem:
    healths = {n: g.harness for n, g in summary.phases.items() if g.harness}
    if any(g.dist("send_ms").n for g in summary.phases.values()):
        return _evidence_item(summary, healths)
    if not healths:
        return TrustItem("harness health", AMBER, "not recorded (a run from an older llmload)")
    small = []
    for name, h in healths.items():
        why = starved(h, phase=name)
        if not why:
            continue
        ttft = summary.phases[name].dist("ttft_ms").p50 or 0.0
        if harness_delay_ms(h) > max(HARNESS_RED[0], HARNESS_RED[1] * ttft):
            return TrustItem("harness health", RED, why + _bundled_note(summary))
        small.append(f"{why}; its delay is small against TTFT p50 {ttft:.0f} ms")
    if small:
        return TrustItem("harness health", AMBER, "; ".join(small) + _bundled_note(summary))
    touched = {
        n: h
        for n, h in healths.items()
        if any(p["saturated_share"] > 0 for p in _load_procs(h).values())
    }
    if touched:
        name, h = next(iter(touched.items()))
        return TrustItem("harness health", AMBER, f"{name}: briefly busy — {harness_text(h)}")
    text = "; ".join(f"{n}: {harness_text(h)}" for n, h in healths.items())
    return TrustItem("harness health", GREEN, text)


def _tokens_item(summary: Summary) -> TrustItem:
    found = [
        (n, g.token_count_mismatch) for n, g in summary.phases.items() if g.token_count_mismatch
    ]
    if not found:
        if any(g.multi_token_events for g in summary.phases.values()):
            why = "not compared: without --tokenizer the client counts events, not tokens"
            return TrustItem("token counts", NA, why)
        return TrustItem("token counts", NA, "not compared (needs server usage and a client count)")
    bad = sum(m["mismatched"] for _, m in found)
    total = sum(m["compared"] for _, m in found)
    rate = bad / total if total else 0.0
    level = RED if rate >= TOKENS_RED else AMBER if rate >= TOKENS_AMBER else GREEN
    return TrustItem(
        "token counts", level, f"server usage and client count differ in {bad}/{total} ({rate:.1%})"
    )


def _gap_item(summary: Summary) -> TrustItem:
    found = [(n, g) for n, g in summary.phases.items() if "client_minus_server_ttft_ms" in g.dists]
    if not found:
        return TrustItem("client − server TTFT", NA, "the target reports no TTFT of its own")
    levels, texts = [], []
    for name, g in found:
        gap, ttft = g.dists["client_minus_server_ttft_ms"], g.dist("ttft_ms").p50 or 0.0
        p95 = gap.p95
        if p95 is None:
            continue
        green = max(GAP_GREEN[0], GAP_GREEN[1] * ttft)
        red = max(GAP_RED[0], GAP_RED[1] * ttft)
        levels.append(RED if p95 > red else AMBER if p95 > green else GREEN)
        texts.append(f"{name}: p50 {gap.p50 or 0.0:.1f} ms, p95 {p95:.1f} ms per request")
    notes = {
        AMBER: " (network, proxy or a busy client)",
        RED: " — more than the network explains: check the harness health and any proxy",
    }
    return _judged_item("client − server TTFT", levels, texts, notes, summary)


def _bundled_note(summary: Summary) -> str:
    """When the server was the bundled one: it ran beside the load generator, on its cores."""
    if not summary.run.get("bundled_server"):
        return ""
    return (
        "; the bundled server ran on this machine beside the load generator and competed "
        "for its cores — lower the load, or run the server elsewhere and pass --target"
    )


def _delay_item(summary: Summary) -> TrustItem:
    found = [
        (n, g.dist("schedule_delay_ms"))
        for n, g in summary.phases.items()
        if g.dist("schedule_delay_ms").n
    ]
    if not found:
        return TrustItem("schedule delay", NA, "closed loop (no intended send times)")
    name, d = max(found, key=lambda kv: kv[1].p95 or 0.0)
    p95 = d.p95 or 0.0
    level = RED if p95 > DELAY_RED_MS else AMBER if p95 > DELAY_AMBER_MS else GREEN
    return TrustItem(
        "schedule delay",
        level,
        f"p95 {p95:.1f} ms ({name}); open-loop rate kept"
        if level == GREEN
        else f"p95 {p95:.1f} ms ({name}): sends fell behind the "
        "schedule (latency from the intended time counts it)",
    )


def _lost_item(summary: Summary) -> TrustItem:
    lost = sum(g.errors.get("lost", 0) for g in summary.phases.values())
    workers = summary.run.get("lost_workers") or []
    corrupt = summary.input.corrupt_lines
    if lost or workers:
        names = ", ".join(sorted({str(w.get("worker")) for w in workers})) or "a worker"
        return TrustItem(
            "lost records", RED, f"{names} lost mid-run: {lost} requests have no outcome"
        )
    if corrupt:
        return TrustItem("lost records", AMBER, f"{corrupt} corrupt lines in requests.jsonl")
    return TrustItem("lost records", GREEN, "every request issued has its record")


def _output_item(summary: Summary) -> TrustItem:
    """Ok responses with no visible output: they have no TTFT, so the percentiles leave them
    out (``reports.table.answers``)."""
    counts = {
        n: (g.extra.get("answers") or {}).get("no_output", 0) for n, g in summary.phases.items()
    }
    empty = {n: k for n, k in counts.items() if k}
    ok = sum(g.ok for g in summary.phases.values())
    if not ok:
        return TrustItem("visible output", NA, "no ok responses")
    if not empty:
        return TrustItem("visible output", GREEN, f"every ok response showed output ({ok})")
    k = sum(empty.values())
    where = ", ".join(f"{n} {c} of {summary.phases[n].ok}" for n, c in empty.items())
    level = RED if k / ok >= NO_OUTPUT_RED else AMBER
    return TrustItem(
        "visible output",
        level,
        f"{k} of {ok} ok responses had no visible output ({where}): the server counted "
        "their tokens but sent no text, so TTFT and TTFO percentiles are of the others only",
    )


def phase_steal(health: dict[str, Any]) -> tuple[float, float] | None:
    """A phase's host CPU steal: (mean %, worst second %) over its load processes' hosts;
    None when the run did not record it (an older llmload)."""
    procs = [p for p in (health.get("processes") or {}).values() if "steal_mean_pct" in p]
    if not procs:
        return None
    return (
        max(float(p["steal_mean_pct"]) for p in procs),
        max(float(p["steal_max_pct"]) for p in procs),
    )


def run_steal(meta: dict[str, Any]) -> float | None:
    """The measured phases' host CPU steal (mean %, warm-up left out) from run.json; None
    when not recorded."""
    means = [
        st[0]
        for name, h in phase_health(meta).items()
        if not name.endswith("warmup") and (st := phase_steal(h)) is not None
    ]
    return round(sum(means) / len(means), 2) if means else None


def _machine_item(summary: Summary) -> TrustItem:
    steals = {
        n: st for n, g in summary.phases.items() if g.harness and (st := phase_steal(g.harness))
    }
    if not steals:
        return TrustItem("machine (CPU steal)", NA, "not recorded (a run from an older llmload)")
    if not any(worst_s for _, worst_s in steals.values()):
        return TrustItem(
            "machine (CPU steal)", NA, "the host reports no steal (bare metal, or not counted)"
        )
    texts = [f"{n}: {mean:.1f} % (worst second {top:.0f} %)" for n, (mean, top) in steals.items()]
    if max(mean for mean, _ in steals.values()) < STEAL_AMBER_PCT:
        return TrustItem("machine (CPU steal)", GREEN, "hypervisor steal " + "; ".join(texts))
    return TrustItem(
        "machine (CPU steal)",
        AMBER,
        "the hypervisor gave other guests "
        + "; ".join(texts)
        + " of this host's CPU time: whatever ran on this host (a bundled target, the "
        "client) ran that much slower in bursts, for no reason a build change made — runs "
        "that met different steal differ in their tails",
    )


def assess(summary: Summary) -> dict[str, Any]:
    """The trust box: ``{"level", "items": [{"check", "level", "reason"}]}``."""
    checks = (
        _harness_item,
        _machine_item,
        _tokens_item,
        _gap_item,
        _delay_item,
        _lost_item,
        _output_item,
    )
    items = [f(summary) for f in checks]
    return {"level": worst([i.level for i in items]), "items": [asdict(i) for i in items]}
