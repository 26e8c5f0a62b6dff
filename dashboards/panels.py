"""Small builders for Grafana dashboard JSON (plain dicts, Grafana 11/12 schema).

Every panel and target points at the ``${datasource}`` template variable, so a
dashboard works against whichever Prometheus the user picks.  ``Grid`` hands out
panel ids and ``gridPos`` left to right, wrapping at Grafana's 24 columns.
"""

from __future__ import annotations

from typing import Any

#: Grafana's dashboard schema version the JSON is written for (Grafana 11.0+;
#: Grafana 11.x and 12.x load it and migrate forward on read).
SCHEMA_VERSION = 39
GRID_WIDTH = 24
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: Label selector shared by the client-side (``llmload_``) series.
CLIENT = 'job=~"$job", mode=~"$mode", scenario=~"$scenario"'
#: Label selector for series that carry only ``job`` (server side, vLLM).
JOB = 'job=~"$job"'
RATE = "$__rate_interval"

Panel = dict[str, Any]


def target(expr: str, legend: str, ref: str, *, fmt: str = "time_series") -> dict[str, Any]:
    """One PromQL query of a panel."""
    return {
        "datasource": dict(DATASOURCE),
        "editorMode": "code",
        "expr": expr,
        "format": fmt,
        "legendFormat": legend,
        "range": True,
        "refId": ref,
    }


def quantile(q: float, metric: str, selector: str, by: str = "") -> str:
    """``histogram_quantile`` over a histogram's buckets, summed by ``le`` (and ``by``)."""
    keys = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({keys}) (rate({metric}_bucket{{{selector}}}[{RATE}])))"


def mean(metric: str, selector: str, by: str = "") -> str:
    """Mean of a histogram over the rate window: rate(sum) / rate(count)."""
    group = f"sum by ({by})" if by else "sum"
    return (
        f"{group} (rate({metric}_sum{{{selector}}}[{RATE}]))"
        f" / {group} (rate({metric}_count{{{selector}}}[{RATE}]))"
    )


def _targets(queries: list[tuple[str, str]], fmt: str = "time_series") -> list[dict[str, Any]]:
    refs = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return [target(expr, legend, refs[i], fmt=fmt) for i, (expr, legend) in enumerate(queries)]


def _panel(
    kind: str,
    title: str,
    description: str,
    defaults: dict[str, Any],
    options: dict[str, Any],
    targets: list[dict[str, Any]],
    width: int,
    height: int,
) -> Panel:
    """The envelope every data panel shares; ``defaults`` and ``options`` are the kind's own."""
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": dict(DATASOURCE),
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": targets,
        "gridPos": {"w": width, "h": height},
    }


def timeseries(
    title: str,
    queries: list[tuple[str, str]],
    unit: str,
    *,
    description: str = "",
    width: int = 12,
    height: int = 8,
    stack: bool = False,
) -> Panel:
    """A time-series panel; ``queries`` are (PromQL, legend) pairs."""
    custom = {
        "drawStyle": "line",
        "lineWidth": 1,
        "fillOpacity": 10 if stack else 0,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
    }
    options = {
        "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull"]},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    defaults = {"unit": unit, "custom": custom}
    return _panel(
        "timeseries", title, description, defaults, options, _targets(queries), width, height
    )


def stat(
    title: str,
    expr: str,
    unit: str,
    *,
    description: str = "",
    steps: tuple[tuple[float, str], ...] = (),
    width: int = 4,
    height: int = 4,
) -> Panel:
    """A single-value stat panel showing the last value; ``steps`` are (from, colour)."""
    thresholds: list[dict[str, Any]] = [{"color": "green", "value": None}]
    thresholds += [{"color": color, "value": value} for value, color in steps]
    defaults = {
        "unit": unit,
        "decimals": 2,
        "color": {"mode": "thresholds"},
        "thresholds": {"mode": "absolute", "steps": thresholds},
    }
    options = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "value",
        "graphMode": "area",
        "textMode": "auto",
    }
    return _panel(
        "stat", title, description, defaults, options, _targets([(expr, title)]), width, height
    )


def heatmap(
    title: str, expr: str, *, description: str = "", width: int = 24, height: int = 8
) -> Panel:
    """A heatmap of a Prometheus histogram's per-interval bucket increases."""
    options = {
        "calculate": False,
        "cellGap": 1,
        "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
        "yAxis": {"unit": "s"},
        "rowsFrame": {"layout": "auto"},
        "tooltip": {"mode": "single", "yHistogram": True},
    }
    targets = _targets([(expr, "{{le}}")], fmt="heatmap")
    return _panel("heatmap", title, description, {}, options, targets, width, height)


def row(title: str) -> Panel:
    """A full-width, expanded row header."""
    return {
        "type": "row",
        "title": title,
        "collapsed": False,
        "panels": [],
        "gridPos": {"w": GRID_WIDTH, "h": 1},
    }


class Grid:
    """Assigns ids and positions: rows start a new line, panels flow left to right."""

    def __init__(self) -> None:
        self.panels: list[Panel] = []
        self._next_id = 1
        self._x = 0
        self._y = 0
        self._line_height = 0

    def _place(self, panel: Panel) -> Panel:
        w, h = panel["gridPos"]["w"], panel["gridPos"]["h"]
        if self._x + w > GRID_WIDTH:
            self._newline()
        panel["id"] = self._next_id
        panel["gridPos"] = {"h": h, "w": w, "x": self._x, "y": self._y}
        self._next_id += 1
        self._x += w
        self._line_height = max(self._line_height, h)
        return panel

    def _newline(self) -> None:
        self._y += self._line_height
        self._x = 0
        self._line_height = 0

    def add_row(self, title: str, panels: list[Panel]) -> None:
        """Add a row header followed by its panels."""
        if self._x:
            self._newline()
        self.panels.append(self._place(row(title)))
        self._newline()
        self.panels.extend(self._place(p) for p in panels)
