"""The "LLM load test" dashboard: client and server latency side by side, run phases marked."""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models import dashboard as dm

from llmload.dashboards import gpus, servers
from llmload.dashboards.names import PHASE_TAG, TITLE, UID
from llmload.dashboards.panels import (
    CLIENT,
    JOB,
    RATE,
    Grid,
    Panel,
    heatmap,
    mean,
    quantile,
    query_variable,
    stat,
    timeseries,
    to_json,
)

#: TTFT p95 SLO, seconds: the same threshold as the LLMTTFTP95SLOBreach alert rule.
TTFT_SLO_S = 2.0
#: Error-ratio alert threshold, percent (LLMErrorRateHigh).
ERROR_SLO_PCT = 5.0

# Client side (exporter, ``llmload_``)
C_TTFT = "llmload_time_to_first_token_seconds"
C_TTFO = "llmload_time_to_first_output_token_seconds"
C_ITL = "llmload_inter_token_latency_seconds"
C_TPOT = "llmload_time_per_output_token_seconds"
C_E2E = "llmload_e2e_request_latency_seconds"
C_DELAY = "llmload_schedule_delay_seconds"
C_REQS = "llmload_requests_total"
C_TOKENS = "llmload_output_tokens_total"
C_INPUTS = "llmload_inputs_total"
# Server side (bundled server, ``llmserve_``)
S_TTFT = "llmserve_time_to_first_token_seconds"
S_ITL = "llmserve_inter_token_latency_seconds"
S_E2E = "llmserve_e2e_request_latency_seconds"
S_QUEUE = "llmserve_queue_time_seconds"
S_DECODE = "llmserve_decode_tokens_per_second"
S_REQS = "llmserve_requests_total"
S_TOKENS = "llmserve_output_tokens_total"

STREAM = f'{CLIENT}, mode="stream"'
S_STREAM = f'{JOB}, stream="true"'


def _p(qs: tuple[float, ...], metric: str, sel: str, by: str, legend: str) -> list[tuple[str, str]]:
    """One (PromQL, legend) pair per quantile; ``legend`` gets the quantile prefixed."""
    return [(quantile(q, metric, sel, by), f"p{round(q * 100)} {legend}") for q in qs]


P3 = (0.5, 0.95, 0.99)
P2 = (0.5, 0.95)


def _error_ratio() -> str:
    errors = f'sum(rate({C_REQS}{{{CLIENT}, status!="ok"}}[{RATE}]))'
    total = f"sum(rate({C_REQS}{{{CLIENT}}}[{RATE}]))"
    return f"100 * ({errors} or vector(0)) / {total}"


def overview() -> list[Panel]:
    """The six numbers a person glances at first."""
    return [
        stat("Requests/s", f"sum(rate({C_REQS}{{{CLIENT}}}[{RATE}]))", "reqps"),
        stat("Active users", f"sum(llmload_active_users{{{JOB}}})", "none"),
        stat(
            "Error %",
            _error_ratio(),
            "percent",
            description="Client-side non-ok / all requests.",
            steps=((1.0, "orange"), (ERROR_SLO_PCT, "red")),
        ),
        stat("Client TTFT p50", quantile(0.5, C_TTFT, CLIENT), "s"),
        stat(
            "Client TTFT p95",
            quantile(0.95, C_TTFT, CLIENT),
            "s",
            description=f"Red at the {TTFT_SLO_S:g} s SLO of the compose stack's alert rule.",
            steps=((TTFT_SLO_S / 2, "orange"), (TTFT_SLO_S, "red")),
        ),
        stat("Output tokens/s", f"sum(rate({C_TOKENS}{{{CLIENT}}}[{RATE}]))", "none"),
    ]


def latency() -> list[Panel]:
    """Client and server latency, and the gap between them."""
    by = "mode, scenario"
    gap = [
        (f"({mean(C_TTFT, STREAM)}) - ({mean(S_TTFT, S_STREAM)})", "mean gap"),
        (f"{quantile(0.5, C_TTFT, STREAM)} - {quantile(0.5, S_TTFT, S_STREAM)}", "p50 gap"),
        (f"{quantile(0.95, C_TTFT, STREAM)} - {quantile(0.95, S_TTFT, S_STREAM)}", "p95 gap"),
    ]
    return [
        timeseries(
            "Client TTFT by mode and scenario",
            _p(P3, C_TTFT, CLIENT, by, "{{mode}} / {{scenario}}"),
            "s",
            description="What users feel: request handed to the HTTP client -> first content.",
        ),
        timeseries(
            "Client TTFO by mode and scenario",
            _p(P3, C_TTFO, CLIENT, by, "{{mode}} / {{scenario}}"),
            "s",
            description=(
                "Time to first output: the first answer text or tool-call piece, after any "
                "reasoning. Equal to TTFT for plain chat; for a reasoning model it is when "
                "the user sees the answer begin, for an agent when its tool call begins."
            ),
        ),
        timeseries(
            "Server TTFT",
            _p(P3, S_TTFT, JOB, "stream", "server stream={{stream}}")
            + _p(P2, "vllm:time_to_first_token_seconds", JOB, "", "vLLM"),
            "s",
            description="What the server thinks it did; vLLM series appear for a vLLM target.",
        ),
        timeseries(
            "Client - server TTFT (streaming)",
            gap,
            "s",
            description=(
                "Network, proxy and client time on top of the server's TTFT. The mean gap is "
                "exact (sums and counts). Client and server histograms share one bucket grid "
                "(llmload/common/buckets.py: each quantile within 5 % from 1 ms to 10 s), so "
                "the quantile gaps subtract like for like; they are differences of quantiles, "
                "not quantiles of per-request gaps. The server has no scenario label: read it "
                "with scenario = All."
            ),
        ),
        timeseries(
            "Inter-token latency",
            _p(P3, C_ITL, CLIENT, by, "client {{mode}} / {{scenario}}")
            + _p(P2, S_ITL, JOB, "", "server")
            + [
                (
                    quantile(0.5, "vllm:inter_token_latency_seconds", JOB)
                    + " or "
                    + quantile(0.5, "vllm:time_per_output_token_seconds", JOB),
                    "p50 vLLM",
                )
            ],
            "s",
        ),
        timeseries(
            "Time per output token",
            _p(P3, C_TPOT, CLIENT, by, "{{mode}} / {{scenario}}"),
            "s",
            description="(last content - first content) / (output tokens - 1), per request.",
        ),
        timeseries(
            "End-to-end latency",
            _p(P3, C_E2E, CLIENT, by, "client {{mode}} / {{scenario}}")
            + _p(P2, S_E2E, JOB, "", "server")
            + _p(P2, "vllm:e2e_request_latency_seconds", JOB, "", "vLLM"),
            "s",
        ),
        heatmap(
            "Client TTFT heatmap",
            f"sum by (le) (increase({C_TTFT}_bucket{{{CLIENT}}}[{RATE}]))",
            description="Requests per TTFT bucket per interval.",
        ),
    ]


def throughput() -> list[Panel]:
    """Tokens and requests per second, client vs server."""
    return [
        timeseries(
            "Output tokens/s: client vs server (inputs/s: embeddings, rerank)",
            [
                (f"sum by (mode) (rate({C_TOKENS}{{{CLIENT}}}[{RATE}]))", "client {{mode}}"),
                (f"sum(rate({S_TOKENS}{{{JOB}}}[{RATE}]))", "server"),
                (f"sum(rate(vllm:generation_tokens_total{{{JOB}}}[{RATE}]))", "vLLM"),
                # embeddings and rerank have no output tokens: texts embedded, documents ranked
                (f"sum by (mode) (rate({C_INPUTS}{{{CLIENT}}}[{RATE}]))", "inputs {{mode}}"),
            ],
            "none",
        ),
        timeseries(
            "Requests/s by status",
            [
                (f"sum by (status) (rate({C_REQS}{{{CLIENT}}}[{RATE}]))", "client {{status}}"),
                (f"sum by (status) (rate({S_REQS}{{{JOB}}}[{RATE}]))", "server {{status}}"),
            ],
            "reqps",
            stack=False,
        ),
    ]


def server() -> list[Panel]:
    """The server's own state: bundled server series, and vLLM's when the target is vLLM."""
    return [
        timeseries(
            "Running / waiting requests",
            [
                (f"sum(llmserve_requests_running{{{JOB}}})", "running"),
                (f"sum(llmserve_requests_waiting{{{JOB}}})", "waiting"),
                (f"sum(vllm:num_requests_running{{{JOB}}})", "vLLM running"),
                (f"sum(vllm:num_requests_waiting{{{JOB}}})", "vLLM waiting"),
            ],
            "none",
            width=8,
        ),
        timeseries(
            "Queue time",
            _p(P2, S_QUEUE, JOB, "", "server")
            + _p(P2, "vllm:request_queue_time_seconds", JOB, "", "vLLM"),
            "s",
            width=8,
        ),
        timeseries(
            "Per-request decode tokens/s (server)",
            _p((0.05, 0.5), S_DECODE, JOB, "", "server"),
            "none",
            description="Per request: (output tokens - 1) / decode time. p5 is the slow tail.",
            width=8,
        ),
        timeseries(
            "GPU memory (CUDA targets)",
            [
                (f"sum by (instance) (llmserve_gpu_memory_allocated_bytes{{{JOB}}})", "allocated"),
                (f"sum by (instance) (llmserve_gpu_memory_reserved_bytes{{{JOB}}})", "reserved"),
            ],
            "bytes",
            description="Only the transformers engine on a CUDA device exports these.",
        ),
        timeseries(
            "vLLM KV-cache usage",
            [
                (
                    f"max(vllm:kv_cache_usage_perc{{{JOB}}})"
                    f" or max(vllm:gpu_cache_usage_perc{{{JOB}}})",
                    "KV cache",
                )
            ],
            "percentunit",
            description="vLLM >= 0.10 kv_cache_usage_perc; older gpu_cache_usage_perc.",
        ),
    ]


def _hit_rate(hits: str, queries: str, sel: str) -> str:
    return f"sum(rate({hits}{{{sel}}}[{RATE}])) / sum(rate({queries}{{{sel}}}[{RATE}]))"


def workloads() -> list[Panel]:
    """The field's workloads: the prefix cache's hit rate, agent sessions' TTFT by step."""
    return [
        timeseries(
            "Prefix-cache hit rate: client vs server",
            [
                (
                    _hit_rate(
                        "llmload_prefix_cache_hits_total",
                        "llmload_prefix_cache_queries_total",
                        CLIENT,
                    ),
                    "client (usage.cached_tokens)",
                ),
                (
                    _hit_rate(
                        "llmserve_prefix_cache_hits_total",
                        "llmserve_prefix_cache_queries_total",
                        JOB,
                    ),
                    "server",
                ),
                (
                    _hit_rate(
                        "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", JOB
                    ),
                    "vLLM",
                ),
            ],
            "percentunit",
            description="Cached over prompt tokens. Client: from each response's "
            "usage.prompt_tokens_details.cached_tokens; server: the bundled server's prefix "
            "cache (--prefix-cache-blocks) or vLLM's.",
        ),
        timeseries(
            "Agent sessions: TTFT by step",
            _p(
                P2,
                "llmload_agent_step_ttft_seconds",
                CLIENT,
                "step",
                "step {{step}}",
            ),
            "s",
            description="--dataset agent: each step carries the whole history, so its TTFT "
            "grows with the step unless a prefix cache serves the history.",
        ),
    ]


#: Engine busy ratio thresholds: above the first the target has little headroom left,
#: above the second latencies are mostly queueing.
BUSY_WARN, BUSY_SATURATED = 0.5, 0.8


def saturation() -> list[Panel]:
    """Is the target itself the bottleneck? The bundled server's engine load gauges."""
    busy = f"max(llmserve_engine_busy_ratio{{{JOB}}})"
    return [
        stat(
            "Engine busy",
            busy,
            "percentunit",
            description=(
                "Share of the last 10 s the busiest engine spent working (synthetic engine: "
                "its process's CPU). Orange above 50 %: little headroom; red above 80 %: "
                "latencies are mostly queueing."
            ),
            steps=((BUSY_WARN, "orange"), (BUSY_SATURATED, "red")),
            width=6,
            height=8,
        ),
        timeseries(
            "Engine busy ratio",
            [(f"max by (instance) (llmserve_engine_busy_ratio{{{JOB}}})", "{{instance}}")],
            "percentunit",
            description="Near 1 while the queue depth grows: the target, not the client, "
            "limits the run.",
            width=6,
        ),
        timeseries(
            "Engine queue depth",
            [(f"sum by (instance) (llmserve_engine_queue_depth{{{JOB}}})", "{{instance}}")],
            "none",
            description="Requests handed to the engine, not generating yet (the synthetic "
            "engine has no queue of its own: 0). Admission's queue is on Running / waiting.",
            width=6,
        ),
        timeseries(
            "Engine batch size",
            [(f"sum by (instance) (llmserve_engine_batch_size{{{JOB}}})", "{{instance}}")],
            "none",
            description="Rows in the running decode batch (threaded engine and synthetic "
            "engine: streams generating).",
            width=6,
        ),
    ]


def harness() -> list[Panel]:
    """Is the load generator itself the bottleneck?"""
    return [
        timeseries(
            "Client CPU %",
            [
                (f"llmload_client_cpu_percent{{{JOB}}}", "{{instance}} {{source}}"),
                (f"llmload_host_cpu_steal_percent{{{JOB}}}", "{{instance}} host steal"),
            ],
            "percent",
            description="Per load-generator process. Near 100 % means the client limits the "
            "run. Host steal: the hypervisor's share of the host's CPU time (a shared VM's "
            "bursts slow everything on it).",
            width=8,
        ),
        timeseries(
            "Event-loop lag",
            [(f"llmload_event_loop_lag_seconds{{{JOB}}}", "{{instance}} {{source}}")],
            "s",
            description="gevent hub latency: every ms here is added to measured TTFT.",
            width=8,
        ),
        timeseries(
            "Schedule delay (open loop)",
            _p(P3, C_DELAY, CLIENT, "mode", "{{mode}}")
            + [(f"sum(llmload_requests_in_flight{{{CLIENT}}})", "in flight")],
            "s",
            description="Actual - intended send time. Grows when the client cannot keep the rate.",
            width=8,
        ),
    ]


def _variables() -> list[Builder[dm.VariableModel]]:
    datasource = (
        db.DatasourceVariable("datasource")
        .label("Prometheus")
        .type("prometheus")
        .hide(dm.VariableHide.DONT_HIDE)
        .regex("")
    )
    return [
        datasource,
        query_variable("job", "label_values(up, job)"),
        query_variable("mode", f'label_values({C_REQS}{{job=~"$job"}}, mode)'),
        query_variable("scenario", f'label_values({C_REQS}{{job=~"$job"}}, scenario)'),
    ]


def _annotations() -> list[Builder[dm.AnnotationQuery]]:
    grafana = dm.DataSourceRef(type_val="grafana", uid="-- Grafana --")
    builtin = (
        db.AnnotationQuery()
        .built_in(1)
        .datasource(grafana)
        .enable(True)
        .hide(True)
        .icon_color("rgba(0, 211, 255, 1)")
        .name("Annotations & Alerts")
        .type("dashboard")
    )
    phases = (
        db.AnnotationQuery()
        .datasource(grafana)
        .enable(True)
        .hide(False)
        .icon_color("rgba(255, 152, 48, 1)")
        .name("Run phases")
        .target(db.AnnotationTarget().type("tags").tags([PHASE_TAG]).match_any(False).limit(100))
    )
    return [builtin, phases]


def build() -> dict[str, Any]:
    """The dashboard as a JSON-ready dict."""
    dashboard = (
        db.Dashboard(TITLE)
        .uid(UID)
        .description("llmload: client-side (what users feel) vs server-side latency.")
        .tags(["llmload", "llm"])
        .editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .refresh("5s")
        .time("now-30m", "now")
        .timezone("browser")
        .fiscal_year_start_month(0)
        .live_now(False)
        .links([])
        .version(1)
        .annotations(_annotations())
        .variables(_variables())
    )
    grid = Grid(dashboard)
    grid.add_row("Overview", overview())
    grid.add_row("Latency", latency())
    grid.add_row("Throughput", throughput())
    grid.add_row("Workloads: prefix cache, agent sessions", workloads())
    grid.add_row("Server", server())
    grid.add_row("Is the target saturated?", saturation())
    grid.add_row("GPUs (dcgm-exporter, AMD exporter): energy per token", gpus.row())
    grid.add_row("Harness health", harness())
    for known in servers.SERVERS:
        grid.add_row(f"{known.name} (its own /metrics)", servers.row(known))
    return to_json(dashboard)
