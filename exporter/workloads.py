"""Client-side metrics of the field's workloads: prefix-cache tokens and agent steps.

* ``llmload_prefix_cache_queries_total`` / ``llmload_prefix_cache_hits_total``
  ``{mode,scenario,endpoint}``: prompt tokens, and of those the ones the target's
  prefix cache served, summed over the requests whose usage says so
  (``usage.prompt_tokens_details.cached_tokens``; vLLM's names, counted from the
  client's records): ``rate(hits) / rate(queries)`` is the hit rate, as in the report.
* ``llmload_agent_step_ttft_seconds{mode,scenario,step}``: TTFT of agent-session requests
  (``--dataset agent``) by step, ok and not warm-up.  ``step`` is bounded: the first
  ``MAX_STEPS`` step numbers keep theirs, later ones are ``other``.

Fed by ``LiveMetrics.on_record`` with the record's capped label values; the
families are rendered with the rest (``llmload.common.families``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from llmload.common.families import LabelledHistogram, LabelledValue
from llmload.exporter.buckets import LATENCY_BUCKETS
from llmload.exporter.labels import CappedLabel
from llmload.loadtests.measure.record import RequestRecord

#: agent step numbers past this many are exported as ``step="other"``
MAX_STEPS = 16


class WorkloadMetrics:
    """The workload families of one registry (``observe`` each record, ``families`` to render)."""

    def __init__(self, registry: CollectorRegistry, labels: tuple[str, ...]) -> None:
        self.queries = LabelledValue(
            "llmload_prefix_cache_queries",
            "Prompt tokens of requests whose usage gave cached_tokens (warm-up included).",
            labels,
            registry=registry,
        )
        self.hits = LabelledValue(
            "llmload_prefix_cache_hits",
            "Of those prompt tokens, the ones the target's prefix cache served.",
            labels,
            registry=registry,
        )
        self.step_ttft = LabelledHistogram(
            "llmload_agent_step_ttft_seconds",
            "Agent sessions: client-side TTFT by step (model call) of the session, ok requests.",
            ("mode", "scenario", "step"),
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self._steps = CappedLabel("step", MAX_STEPS)

    @property
    def families(self) -> tuple[LabelledValue | LabelledHistogram, ...]:
        return (self.queries, self.hits, self.step_ttft)

    def observe(self, key: tuple[str, ...], record: RequestRecord) -> None:
        """Count one record under ``key`` (its capped mode, scenario and endpoint)."""
        if record.cached_tokens is not None and record.prompt_tokens:
            self.queries.labels(*key).inc(record.prompt_tokens)
            self.hits.labels(*key).inc(record.cached_tokens)
        if record.step is None or not record.ok or record.warmup or record.ttft_s is None:
            return
        step = self._steps.value(str(record.step))
        self.step_ttft.labels(key[0], key[1], step).observe(record.ttft_s)
