"""The server's own saturation signals over a capacity step, as evidence for the search.

A step saturated the server, by its own account, when

* requests were waiting in **every** periodic scrape while the step's load was on
  (from its start to its last request's start: the drain that ends a step empties
  any queue; the full scrapes at its boundaries are left out too) — the server
  runs all it can and the rest queue, so more load only adds queue.  In an open
  loop (``growing=True``) a queue is also normal below capacity (arrivals bunch:
  at 85 % of a server's rate it is rarely empty), so there the queue must also
  grow through the step — its last third's median above its first third's — the
  sign that requests arrive faster than the server finishes them,
* its KV cache reached ``KV_FULL`` (no room for more sequences), or
* it preempted (vLLM) or retracted (SGLang) requests during the step.

``llmload.capacity.plan`` adds these reasons to the step's ``saturated`` list (a
passing step that saturates the target ends the search there), and the report's
capacity curve shows them beside the client's own signs.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from llmload.loadtests import serverfamilies
from llmload.loadtests.run.promsample import Sample

KV_FULL = 0.95
#: scrapes a step needs before "waiting the whole step" means anything
MIN_SCRAPES = 2


def _value(s: Sample, server: serverfamilies.Server, role: str) -> float | None:
    for f in server.for_role(role):
        if f.name in s.values:
            v = s.values[f.name]
            if role in serverfamilies.RATIO_ROLES:
                v /= s.series.get(f.name, 1)
            return v
    return None


def _grows(series: list[float]) -> bool:
    """The series' last third has a higher median than its first third."""
    third = max(1, len(series) // 3)
    return statistics.median(series[-third:]) > statistics.median(series[:third])


def server_saturation(
    samples: Iterable[tuple[float, Sample]],
    t0: float,
    t1: float,
    t_end: float | None = None,
    growing: bool = False,
) -> list[str]:
    """Why the server's own metrics say it was saturated between ``t0`` and ``t1`` — the
    step's start and its last request's start; preemptions count to ``t_end``, the step's
    end (empty: they do not say so, or there are none).  ``growing``: an open-loop step,
    whose queue must also grow through the step to count."""
    t_end = t1 if t_end is None else t_end
    everything = sorted(samples, key=lambda ts: ts[0])
    names = {n for _, s in everything for n in s.names()}
    server = serverfamilies.detect(names)
    if server is None:
        return []
    inside = [s for t, s in everything if t0 <= t <= t1]
    why = []
    periodic = [s for s in inside if not s.full]
    waiting = [v for s in periodic if (v := _value(s, server, "waiting")) is not None]
    if len(waiting) >= MIN_SCRAPES and min(waiting) > 0 and (not growing or _grows(waiting)):
        why.append(
            f"server queue: {server.name} had requests waiting in all {len(waiting)} scrapes "
            f"of the step (median {statistics.median(waiting):g})"
        )
    kv = [v for s in inside if (v := _value(s, server, "kv_usage")) is not None]
    if kv and max(kv) >= KV_FULL:
        why.append(f"server KV cache: {server.name}'s reached {max(kv):.0%}")
    before = [s for t, s in everything if t <= t0]
    after = [s for t, s in everything if t >= t_end]
    if before and after:
        a = _value(before[-1], server, "preemptions")
        b = _value(after[0], server, "preemptions")
        if a is not None and b is not None and b > a:
            why.append(f"server preemptions: {server.name} preempted {b - a:g} requests")
    return why
