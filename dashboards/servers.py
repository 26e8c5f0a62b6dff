"""A dashboard row per model server llmload knows (``loadtests.serverfamilies``).

Each row reads the server's own families by role — running and waiting, queue
/ prefill / decode time, TTFT and inter-token latency, KV cache and prefix
hits, preemptions — with the target's job (``$job``) as the template, so the
row of the server being tested fills in and the others stay empty.  The
bundled server's families have their own rows (``llm_load``).
"""

from __future__ import annotations

from llmload.dashboards.panels import JOB, RATE, Panel, quantile, timeseries
from llmload.loadtests import serverfamilies as sf

#: the servers with a row here (the bundled server's panels are the "Server" row)
SERVERS = (sf.VLLM, sf.SGLANG, sf.TGI)


def _names(server: sf.Server, *roles: str) -> list[tuple[str, str]]:
    return [(f.name, f.role) for r in roles for f in server.for_role(r)]


def _gauge(name: str, role: str) -> str:
    how = "avg" if role in sf.RATIO_ROLES else "sum"
    return f"{how}({name}{{{JOB}}})"


def row(server: sf.Server) -> list[Panel]:
    """The panels of one server's row (only the roles it has)."""
    n = server.name
    panels: list[Panel] = []
    state = [(_gauge(f, r), f"{r} ({f})") for f, r in _names(server, "running", "waiting")]
    if state:
        panels.append(timeseries(f"{n}: running / waiting", state, "none", width=8))
    times = [
        (quantile(q, f, JOB), f"p{round(q * 100)} {r}")
        for f, r in _names(server, "queue", "prefill", "decode", "inference")
        for q in (0.5, 0.95)
    ]
    if times:
        panels.append(
            timeseries(
                f"{n}: queue, prefill, decode time",
                times,
                "s",
                description="From the server's own histograms (quantiles within a bucket of "
                "its grid).",
                width=8,
            )
        )
    lat = [
        (quantile(q, f, JOB), f"p{round(q * 100)} {r} ({f})")
        for f, r in _names(server, "ttft", "itl", "tpot")
        for q in (0.5, 0.95)
    ]
    if lat:
        panels.append(timeseries(f"{n}: TTFT and inter-token latency", lat, "s", width=8))
    cache = [(_gauge(f, r), r.replace("_", " ")) for f, r in _names(server, "kv_usage")]
    cache += [(_gauge(f, r), "prefix hit rate") for f, r in _names(server, "prefix_hit_rate")]
    hits, queries = server.for_role("prefix_hits"), server.for_role("prefix_queries")
    for h, q in zip(hits, queries, strict=False):
        ratio = (
            f"sum(rate({h.name}_total{{{JOB}}}[{RATE}])) / "
            f"clamp_min(sum(rate({q.name}_total{{{JOB}}}[{RATE}])), 1e-9)"
        )
        cache.append((ratio, f"prefix hit rate ({h.name})"))
    if cache:
        panels.append(timeseries(f"{n}: KV cache and prefix cache", cache, "percentunit", width=12))
    pre = [
        (f"sum(rate({f}_total{{{JOB}}}[{RATE}]))", f"{r}/s")
        for f, r in _names(server, "preemptions")
    ]
    if pre:
        panels.append(timeseries(f"{n}: preemptions", pre, "none", width=12))
    return panels
