"""The model servers' own Prometheus families that llmload knows, by role.

One catalogue for the three places that read a target's ``/metrics``: the
scraper (``loadtests.run.scrape``: which families to keep), the report
(``reports.server``: what each one means) and the dashboards (a row per server).

A family is named as ``prometheus_client.parser`` reports it: a counter without
its ``_total`` suffix.  Each has a ``role`` — what it says about the server —
so the report reads "the queue time" whichever server it came from.  Where a
server renamed a family, both names are listed in preference order (vLLM's
``kv_cache_usage_perc`` replaced ``gpu_cache_usage_perc`` in 0.9); the first one
a scrape holds is used.

The names, types and labels come from each project's own source (``source``
below); ``tests/fixtures/metrics/*.txt`` are recorded-shape ``/metrics`` texts
that pin them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: what a family says about the server, and how several series of it combine
ROLES = {
    "running": "requests being generated (sum over series)",
    "waiting": "requests waiting for a slot (sum over series)",
    "kv_usage": "KV-cache usage, 0..1 (mean over series)",
    "prefix_queries": "prefix-cache lookups, tokens (counter)",
    "prefix_hits": "prefix-cache hits, tokens (counter)",
    "prefix_hit_rate": "prefix-cache hit rate, 0..1 (gauge; mean over series)",
    "preemptions": "requests preempted or retracted (counter)",
    "prompt_tokens": "prompt tokens processed (counter)",
    "generation_tokens": "tokens generated (counter)",
    "ttft": "time to first token, s (histogram)",
    "itl": "inter-token latency, s (histogram)",
    "tpot": "mean time per output token of a request, s (histogram)",
    "queue": "time waiting before generation, s (histogram)",
    "prefill": "prefill time, s (histogram)",
    "decode": "decode time, s (histogram)",
    "inference": "prefill + decode time, s (histogram)",
    "e2e": "arrival to last token, s (histogram)",
}
#: roles whose series are averaged, not summed (a ratio per engine)
RATIO_ROLES = frozenset(("kv_usage", "prefix_hit_rate"))
KINDS = ("gauge", "counter", "histogram")


@dataclass(frozen=True)
class Family:
    """One Prometheus family of a server: its name, type and role."""

    name: str
    kind: str
    role: str

    def __post_init__(self) -> None:
        if self.role not in ROLES or self.kind not in KINDS:
            raise ValueError(f"{self.name}: unknown role {self.role!r} or kind {self.kind!r}")


@dataclass(frozen=True)
class Server:
    """A model server's families (``key`` in files, ``name`` in sentences)."""

    key: str
    name: str
    families: tuple[Family, ...]
    #: the file in the server's own repository the names were taken from
    source: str

    def names(self) -> list[str]:
        return [f.name for f in self.families]

    def for_role(self, role: str) -> list[Family]:
        """The families that play ``role``, in preference order."""
        return [f for f in self.families if f.role == role]

    @property
    def roles(self) -> list[str]:
        return list(dict.fromkeys(f.role for f in self.families))


def _g(name: str, role: str) -> Family:
    return Family(name, "gauge", role)


def _c(name: str, role: str) -> Family:
    return Family(name, "counter", role)


def _h(name: str, role: str) -> Family:
    return Family(name, "histogram", role)


VLLM = Server(
    "vllm",
    "vLLM",
    (
        _g("vllm:num_requests_running", "running"),
        _g("vllm:num_requests_waiting", "waiting"),
        _g("vllm:kv_cache_usage_perc", "kv_usage"),
        _g("vllm:gpu_cache_usage_perc", "kv_usage"),  # before 0.10
        _c("vllm:prefix_cache_queries", "prefix_queries"),
        _c("vllm:gpu_prefix_cache_queries", "prefix_queries"),  # before 0.10
        _c("vllm:prefix_cache_hits", "prefix_hits"),
        _c("vllm:gpu_prefix_cache_hits", "prefix_hits"),  # before 0.10
        _c("vllm:num_preemptions", "preemptions"),
        _c("vllm:prompt_tokens", "prompt_tokens"),
        _c("vllm:generation_tokens", "generation_tokens"),
        _h("vllm:time_to_first_token_seconds", "ttft"),
        _h("vllm:inter_token_latency_seconds", "itl"),
        _h("vllm:time_per_output_token_seconds", "itl"),  # the same gaps, its older name
        _h("vllm:request_time_per_output_token_seconds", "tpot"),
        _h("vllm:request_queue_time_seconds", "queue"),
        _h("vllm:request_prefill_time_seconds", "prefill"),
        _h("vllm:request_decode_time_seconds", "decode"),
        _h("vllm:request_inference_time_seconds", "inference"),
        _h("vllm:e2e_request_latency_seconds", "e2e"),
    ),
    "vllm-project/vllm: vllm/v1/metrics/loggers.py (PrometheusStatLogger)",
)

SGLANG = Server(
    "sglang",
    "SGLang",
    (
        _g("sglang:num_running_reqs", "running"),
        _g("sglang:num_queue_reqs", "waiting"),
        _g("sglang:token_usage", "kv_usage"),
        _g("sglang:cache_hit_rate", "prefix_hit_rate"),
        _c("sglang:num_retracted_requests", "preemptions"),
        _c("sglang:prompt_tokens", "prompt_tokens"),
        _c("sglang:generation_tokens", "generation_tokens"),
        _h("sglang:time_to_first_token_seconds", "ttft"),
        _h("sglang:inter_token_latency_seconds", "itl"),
        _h("sglang:queue_time_seconds", "queue"),
        _h("sglang:e2e_request_latency_seconds", "e2e"),
    ),
    "sgl-project/sglang: python/sglang/srt/metrics/collector.py "
    "(SchedulerMetricsCollector, TokenizerMetricsCollector)",
)

TGI = Server(
    "tgi",
    "TGI",
    (
        _g("tgi_batch_current_size", "running"),
        _g("tgi_queue_size", "waiting"),
        _h("tgi_request_queue_duration", "queue"),
        _h("tgi_request_mean_time_per_token_duration", "tpot"),
        _h("tgi_request_inference_duration", "inference"),
        _h("tgi_request_duration", "e2e"),
    ),
    "huggingface/text-generation-inference: router/src (metrics), docs/source/reference/metrics.md",
)

LLMSERVE = Server(
    "llmserve",
    "the bundled server",
    (
        _g("llmserve_requests_running", "running"),
        _g("llmserve_requests_waiting", "waiting"),
        _c("llmserve_prompt_tokens", "prompt_tokens"),
        _c("llmserve_output_tokens", "generation_tokens"),
        _h("llmserve_time_to_first_token_seconds", "ttft"),
        _h("llmserve_inter_token_latency_seconds", "itl"),
        _h("llmserve_queue_time_seconds", "queue"),
        _h("llmserve_e2e_request_latency_seconds", "e2e"),
    ),
    "this repository: target_server/metrics.py",
)

SERVERS: tuple[Server, ...] = (VLLM, SGLANG, TGI, LLMSERVE)
BY_KEY = {s.key: s for s in SERVERS}


def known_names() -> list[str]:
    """Every family name of every known server."""
    return [n for s in SERVERS for n in s.names()]


def family_name(name: str) -> str:
    """A family name as the parser reports it: a counter's ``_total`` suffix dropped."""
    return name.removesuffix("_total")


def detect(present: Iterable[str]) -> Server | None:
    """The known server most of whose families are ``present`` (None: none of them)."""
    have = set(present)
    scored = [(sum(n in have for n in s.names()), s) for s in SERVERS]
    best, server = max(scored, key=lambda x: x[0])
    return server if best else None
