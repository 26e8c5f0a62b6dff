"""Dashboards as code: the committed JSON matches the code, the structure is sound, and
every metric a panel reads is one the server or the exporter defines.

Not covered here (no Grafana server can run on these machines): how Grafana renders
the panels.  ``tests/integration/test_dashboards_promql.py`` runs every query against
a real Prometheus; ``test_dashboards_grafana_api.py`` checks push and annotations
against a stand-in for Grafana's HTTP API.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from llmload.dashboards import build as builder
from llmload.dashboards import llm_load, validate
from llmload.dashboards.grafana import credential_from_env
from llmload.dashboards.push import payload
from llmload.exporter.live import LiveMetrics
from llmload.loadtests import gpufamilies

ROOT = Path(__file__).resolve().parents[2]
#: Metrics the dashboards read that neither registry below defines, and why.
ALLOWED_PREFIXES = {
    "vllm:": "vLLM's own metrics: panels show them when the target is vLLM",
    "sglang:": "SGLang's own metrics (loadtests/serverfamilies.py)",
    "tgi_": "TGI's own metrics (loadtests/serverfamilies.py)",
    "llmserve_gpu_memory_": "engine gauges, exported only by the transformers engine on CUDA",
    **{
        name: "a GPU exporter's families (loadtests/gpufamilies.py)"
        for name in gpufamilies.known_names()
    },
}


def _sample_names(registry: CollectorRegistry) -> set[str]:
    names: set[str] = set()
    for family in registry.collect():
        if family.type == "histogram":
            names |= {f"{family.name}{s}" for s in ("_bucket", "_sum", "_count")}
        elif family.type == "counter":
            names.add(f"{family.name}_total")
        else:
            names.add(family.name)
    return names


def defined_metric_names() -> set[str]:
    """Every series name the bundled server and the client exporter can expose."""
    import llmload.target_server.synthetic  # noqa: F401  (registers the synthetic engine)
    from llmload.exporter.live import LiveMetrics
    from llmload.target_server.engine import build_engine
    from llmload.target_server.settings import parse_settings
    from llmload.target_server.state import ServerState

    settings = parse_settings([], env={})
    server = ServerState(build_engine(settings), settings).metrics.registry
    return _sample_names(server) | _sample_names(LiveMetrics().registry) | {"up"}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return llm_load.build()


def test_check_command_passes_on_the_committed_json() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llmload.dashboards", "check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_check_command_fails_on_drift(tmp_path: Path) -> None:
    builder.build(tmp_path)
    assert builder.drift(tmp_path) == []
    path = tmp_path / builder.DASHBOARDS[0].filename
    edited = json.loads(path.read_text())
    edited["title"] = "edited by hand"
    path.write_text(json.dumps(edited))
    done = subprocess.run(
        [sys.executable, "-m", "llmload.dashboards", "check", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "differs from the code" in done.stderr
    path.unlink()
    assert builder.drift(tmp_path) == [str(path)]


def test_committed_json_is_the_generated_json() -> None:
    for d in builder.DASHBOARDS:
        committed = json.loads((builder.JSON_DIR / d.filename).read_text())
        assert committed == d.build()


def test_structure_is_valid(dashboard: dict) -> None:
    assert validate.problems(dashboard, llm_load.PHASE_TAG) == []


def test_rows_in_the_issue_order(dashboard: dict) -> None:
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == [
        "Overview",
        "Latency",
        "Throughput",
        "Workloads: prefix cache, agent sessions",
        "Server",
        "Is the target saturated?",
        "GPUs (dcgm-exporter, AMD exporter): energy per token",
        "Harness health",
        "vLLM (its own /metrics)",
        "SGLang (its own /metrics)",
        "TGI (its own /metrics)",
    ]
    titles = {p["title"] for p in validate.iter_panels(dashboard)}
    for needed in (
        "Requests/s",
        "Active users",
        "Error %",
        "Client TTFT p50",
        "Client TTFT p95",
        "Output tokens/s",
        "Client TTFT by mode and scenario",
        "Server TTFT",
        "Client - server TTFT (streaming)",
        "Inter-token latency",
        "Time per output token",
        "End-to-end latency",
        "Client TTFT heatmap",
        "Output tokens/s: client vs server (inputs/s: embeddings, rerank)",
        "Requests/s by status",
        "Running / waiting requests",
        "Queue time",
        "GPU memory (CUDA targets)",
        "Engine busy",
        "Engine busy ratio",
        "Engine queue depth",
        "Engine batch size",
        "Client CPU %",
        "Event-loop lag",
        "Schedule delay (open loop)",
        "Prefix-cache hit rate: client vs server",
        "Agent sessions: TTFT by step",
        "GPU power",
        "Output tokens per joule (GPU)",
    ):
        assert needed in titles


def test_template_variables_and_phase_annotations(dashboard: dict) -> None:
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names == ["datasource", "job", "mode", "scenario"]
    phases = dashboard["annotations"]["list"][1]
    assert phases["target"]["tags"] == [llm_load.PHASE_TAG]
    assert phases["datasource"]["uid"] == "-- Grafana --"


def test_every_query_filters_on_the_variables(dashboard: dict) -> None:
    # the exporter's process-wide gauges carry no mode/scenario labels: those it keeps in
    # its plain registry (read from the exporter, so a new one needs no entry here)
    plain = LiveMetrics()._plain
    unlabelled = {sample.name for fam in plain.collect() for sample in fam.samples}
    assert "llmload_client_cpu_percent" in unlabelled
    for title, ref, expr in validate.expressions(dashboard):
        assert 'job=~"$job"' in expr, (title, ref)
        client = {n for n in validate.metric_names(expr) if n.startswith("llmload_")}
        if client - unlabelled:
            assert 'mode=~"$mode"' in expr and 'scenario=~"$scenario"' in expr, (title, ref)


def test_every_metric_is_defined_by_the_server_or_the_exporter(dashboard: dict) -> None:
    defined = defined_metric_names()
    sources = "\n".join(p.read_text() for p in (ROOT / "target_server").rglob("*.py"))
    unknown = []
    for title, ref, expr in validate.expressions(dashboard):
        for name in validate.metric_names(expr):
            allowed = [p for p in ALLOWED_PREFIXES if name.startswith(p)]
            if name in defined:
                continue
            if allowed and allowed[0] == "llmserve_gpu_memory_":
                # engine gauges are named in the engine's source without the prefix
                assert name.removeprefix("llmserve_") in sources, (title, name)
            elif not allowed:
                unknown.append((title, ref, name))
    assert unknown == []


def test_validation_catches_broken_dashboards(dashboard: dict) -> None:
    def broken(edit) -> list[str]:
        d = copy.deepcopy(dashboard)
        edit(d)
        return validate.problems(d, llm_load.PHASE_TAG)

    def dup_id(d: dict) -> None:
        d["panels"][2]["id"] = d["panels"][1]["id"]

    def overlap(d: dict) -> None:
        d["panels"][2]["gridPos"] = dict(d["panels"][1]["gridPos"])

    def wide(d: dict) -> None:
        d["panels"][1]["gridPos"]["x"] = 22

    def hard_datasource(d: dict) -> None:
        d["panels"][1]["targets"][0]["datasource"] = {"type": "prometheus", "uid": "abc"}

    def undefined_var(d: dict) -> None:
        d["panels"][1]["targets"][0]["expr"] += " + on() vector($instance)"

    def no_mode(d: dict) -> None:
        d["templating"]["list"] = [v for v in d["templating"]["list"] if v["name"] != "mode"]

    def no_phases(d: dict) -> None:
        d["annotations"]["list"] = d["annotations"]["list"][:1]

    def old_schema(d: dict) -> None:
        d["schemaVersion"] = 27

    cases = {
        dup_id: "not unique",
        overlap: "overlap",
        wide: "outside",
        hard_datasource: "datasource",
        undefined_var: "undefined variables",
        no_mode: "'mode' missing",
        no_phases: "run phases",
        old_schema: "schemaVersion",
    }
    for edit, words in cases.items():
        found = broken(edit)
        assert any(words in p for p in found), (edit.__name__, found)


def test_metric_names_parses_selectors() -> None:
    expr = (
        'histogram_quantile(0.5, sum by (le) (rate(llmload_ttft_bucket{job=~"$job"}[5m])))'
        ' or sum(vllm:num_requests_running{job="x"}) / on() count(up{a="b"})'
    )
    assert validate.metric_names(expr) == {"llmload_ttft_bucket", "vllm:num_requests_running", "up"}


def test_credentials_come_from_the_environment() -> None:
    assert credential_from_env({"GRAFANA_TOKEN": "t", "GRAFANA_USER": "u"}) == "t"
    assert credential_from_env({"GRAFANA_USER": "u", "GRAFANA_PASSWORD": "p"}) == ("u", "p")
    assert credential_from_env({"GRAFANA_USER": "u"}) is None


def test_push_payload_overwrites_by_uid(dashboard: dict) -> None:
    body = payload(dashboard, folder_uid="llm")
    assert body["dashboard"]["id"] is None and body["dashboard"]["uid"] == llm_load.UID
    assert body["overwrite"] is True and body["folderUid"] == "llm"
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", body["dashboard"]["uid"])


def test_stat_thresholds_match_the_alert_rules(dashboard: dict) -> None:
    rules = yaml.safe_load((ROOT / "compose/prometheus/rules/llmload.yml").read_text())
    by_name = {r.get("alert") or r.get("record"): r for r in rules["groups"][0]["rules"]}
    assert by_name["LLMTTFTP95SLOBreach"]["expr"].strip().endswith(f"> {llm_load.TTFT_SLO_S:g}")
    assert (
        by_name["LLMErrorRateHigh"]["expr"].strip().endswith(f"> {llm_load.ERROR_SLO_PCT / 100:g}")
    )
    stats = {p["title"]: p for p in validate.iter_panels(dashboard) if p["type"] == "stat"}
    steps = stats["Client TTFT p95"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1] == {"color": "red", "value": llm_load.TTFT_SLO_S}
    steps = stats["Error %"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1] == {"color": "red", "value": llm_load.ERROR_SLO_PCT}


def test_every_legend_and_option_is_set_not_left_to_the_sdk(dashboard: dict) -> None:
    # the SDK's bare legend writes showLegend: false, which would hide every legend
    series = [p for p in dashboard["panels"] if p["type"] == "timeseries"]
    assert series and all(p["options"]["legend"]["showLegend"] is True for p in series)
    assert all(p["options"]["tooltip"]["mode"] == "multi" for p in series)
    variables = [v for v in dashboard["templating"]["list"] if v["type"] == "query"]
    assert all(v["definition"] == v["query"]["query"] for v in variables)


def test_the_load_generator_does_not_import_the_grafana_sdk() -> None:
    probe = (
        "import sys, llmload.dashboards.annotations; "
        "print(any(m.startswith('grafana_foundation_sdk') for m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
