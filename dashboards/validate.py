"""Structural checks on generated dashboards, and the PromQL they contain."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from llmload.dashboards.panels import GRID_WIDTH

#: Template variables every dashboard must define.
REQUIRED_VARS = ("datasource", "job", "mode", "scenario")
#: Grafana's own variables that PromQL may use without defining them.
GLOBAL_VARS = {"__rate_interval", "__interval", "__range", "__all"}
#: Grafana 11.0 wrote 39; Grafana 12 writes 41.
SCHEMA_RANGE = range(39, 42)
DS_REF = "${datasource}"

_METRIC = re.compile(r"(?<![\w:.\"$])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{")
_VAR = re.compile(r"\$\{?(\w+)")


def iter_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including panels nested inside collapsed rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def expressions(dashboard: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(panel title, refId, PromQL) for every query target of every panel."""
    return [
        (panel["title"], t["refId"], t["expr"])
        for panel in iter_panels(dashboard)
        for t in panel.get("targets", [])
    ]


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (every selector here carries ``{...}``)."""
    return {m for m in _METRIC.findall(expr) if m not in {"by", "without", "on", "ignoring"}}


def _overlap(a: dict[str, int], b: dict[str, int]) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def _check_panels(dashboard: dict[str, Any], defined: set[str]) -> list[str]:
    problems: list[str] = []
    seen: dict[int, str] = {}
    boxes: list[tuple[str, dict[str, int]]] = []
    for panel in iter_panels(dashboard):
        title, pid, pos = panel.get("title", "?"), panel.get("id"), panel.get("gridPos", {})
        if not isinstance(pid, int) or pid in seen:
            problems.append(f"panel {title!r}: id {pid!r} missing or not unique")
        else:
            seen[pid] = title
        if not all(isinstance(pos.get(k), int) for k in ("x", "y", "w", "h")):
            problems.append(f"panel {title!r}: gridPos incomplete: {pos}")
            continue
        if pos["x"] < 0 or pos["w"] < 1 or pos["h"] < 1 or pos["x"] + pos["w"] > GRID_WIDTH:
            problems.append(f"panel {title!r}: gridPos outside the {GRID_WIDTH}-column grid")
        problems += [f"panels {t!r} and {title!r} overlap" for t, b in boxes if _overlap(b, pos)]
        boxes.append((title, pos))
        if panel.get("type") == "row":
            continue
        if panel.get("datasource", {}).get("uid") != DS_REF:
            problems.append(f"panel {title!r}: datasource is not {DS_REF}")
        targets = panel.get("targets", [])
        if not targets:
            problems.append(f"panel {title!r}: no queries")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs):
            problems.append(f"panel {title!r}: duplicate refIds {refs}")
        for t in targets:
            if t.get("datasource", {}).get("uid") != DS_REF:
                problems.append(f"panel {title!r} query {t.get('refId')}: datasource not {DS_REF}")
            unknown = set(_VAR.findall(t.get("expr", ""))) - defined - GLOBAL_VARS
            if unknown:
                problems.append(f"panel {title!r}: undefined variables {sorted(unknown)}")
    return problems


def problems(dashboard: dict[str, Any], phase_tag: str) -> list[str]:
    """Everything wrong with a dashboard's structure (empty when it is sound)."""
    found: list[str] = []
    uid = dashboard.get("uid", "")
    if not uid or len(uid) > 40:
        found.append(f"uid {uid!r} must be 1-40 characters")
    if dashboard.get("schemaVersion") not in SCHEMA_RANGE:
        found.append(f"schemaVersion {dashboard.get('schemaVersion')} is not Grafana 11/12")
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    found += [f"template variable {n!r} missing" for n in REQUIRED_VARS if n not in variables]
    ds = variables.get("datasource", {})
    if ds and (ds.get("type") != "datasource" or ds.get("query") != "prometheus"):
        found.append("variable 'datasource' must select Prometheus datasources")
    for name, var in variables.items():
        if var.get("type") == "query" and var.get("datasource", {}).get("uid") != DS_REF:
            found.append(f"variable {name!r}: datasource is not {DS_REF}")
    phases = [
        a
        for a in dashboard.get("annotations", {}).get("list", [])
        if phase_tag in a.get("target", {}).get("tags", [])
    ]
    if not phases:
        found.append(f"no annotation query for run phases (tag {phase_tag!r})")
    return found + _check_panels(dashboard, set(variables))
