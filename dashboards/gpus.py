"""The dashboard's GPU row: the GPU exporter's power and utilization, and energy per token.

Read from the exporters ``loadtests.gpufamilies`` knows (NVIDIA dcgm-exporter,
AMD's device metrics exporter), scraped by the same Prometheus as the target
(its job in ``$job``).  Output tokens per joule is the client's output tokens per
second over the GPUs' summed power (W = J/s); watts per request in flight the
same power over the load generator's requests in flight — the live twins of
the report's per-phase figures (``reports.server.gpu``).
"""

from __future__ import annotations

from llmload.dashboards.panels import CLIENT, JOB, RATE, Panel, timeseries
from llmload.loadtests import gpufamilies as gf


def _by_gpu(role: str) -> list[tuple[str, str]]:
    """Each exporter's family for ``role``, per GPU (the exporter's own GPU label)."""
    out = []
    for exp in gf.EXPORTERS:
        gpu = exp.id_labels[-1]
        for f in exp.for_role(role)[:1]:
            scale = "" if f.scale == 1 else f" * {f.scale:g}"
            out.append(
                (f"sum by ({gpu}) ({f.name}{{{JOB}}}){scale}", f"{exp.key} GPU {{{{{gpu}}}}}")
            )
    return out


def _total_power() -> str:
    """The GPUs' summed power draw, W, from whichever exporter is there."""
    terms = [f"sum({exp.for_role('power')[0].name}{{{JOB}}})" for exp in gf.EXPORTERS]
    return "(" + " or ".join(terms) + ")"


def row() -> list[Panel]:
    """The GPU row's panels."""
    tokens = f"sum(rate(llmload_output_tokens_total{{{CLIENT}}}[{RATE}]))"
    return [
        timeseries("GPU power", _by_gpu("power"), "watt", width=6),
        timeseries("GPU utilization", _by_gpu("util"), "percent", width=6),
        timeseries(
            "Output tokens per joule (GPU)",
            [(f"{tokens} / {_total_power()}", "output tokens / J")],
            "none",
            description="The client's output tokens per second over the GPUs' summed power "
            "(J/s). The run's report gives the same per phase from the energy counter.",
            width=6,
        ),
        timeseries(
            "GPU watts per request in flight",
            [
                (
                    f"{_total_power()} / sum(llmload_requests_in_flight{{{CLIENT}}})",
                    "W per request",
                )
            ],
            "watt",
            width=6,
        ),
    ]
