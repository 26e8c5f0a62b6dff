"""Panel builders on Grafana's Foundation SDK (``grafana-foundation-sdk``, Grafana 11.6 types).

Every panel and target points at the ``${datasource}`` template variable, so a
dashboard works against whichever Prometheus the user picks.  ``Grid`` hands out
panel ids and ``gridPos`` left to right, wrapping at Grafana's 24 columns (the
SDK's own layout gives no ids and wraps only after a line is full).  ``to_json``
turns the SDK's dashboard into the plain dict that ``build`` writes and ``push``
sends.

The SDK's typed defaults are not always Grafana's UI defaults (a bare legend has
``showLegend: false``), so every option a panel shows is set here explicitly.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap as hb
from grafana_foundation_sdk.builders import prometheus as pb
from grafana_foundation_sdk.builders import stat as sb
from grafana_foundation_sdk.builders import timeseries as tb
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm
from grafana_foundation_sdk.models import prometheus as pm

#: Grafana's dashboard schema version the JSON is written as (Grafana 11.0's; 11.x and
#: 12.x migrate forward on read).  The SDK would write 41 (Grafana 11.6); nothing here is
#: touched by the 40 and 41 migrations (``refresh`` is a string, no ``timepicker``).
SCHEMA_VERSION = 39
GRID_WIDTH = 24
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
#: Label selector shared by the client-side (``llmload_``) series.
CLIENT = 'job=~"$job", mode=~"$mode", scenario=~"$scenario"'
#: Label selector for series that carry only ``job`` (server side, vLLM).
JOB = 'job=~"$job"'
RATE = "$__rate_interval"

#: A data panel's builder, sized (``span``/``height``) but not yet placed.
Panel = tb.Panel | sb.Panel | hb.Panel
P = TypeVar("P", tb.Panel, sb.Panel, hb.Panel)


def target(
    expr: str, legend: str, ref: str, *, fmt: pm.PromQueryFormat = pm.PromQueryFormat.TIME_SERIES
) -> pb.Dataquery:
    """One PromQL query of a panel."""
    return (
        pb.Dataquery()
        .datasource(DATASOURCE)
        .editor_mode(pm.QueryEditorMode.CODE)
        .expr(expr)
        .format(fmt)
        .legend_format(legend)
        .range()
        .ref_id(ref)
    )


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


def _envelope(
    panel: P,
    title: str,
    description: str,
    queries: list[tuple[str, str]],
    width: int,
    height: int,
    fmt: pm.PromQueryFormat = pm.PromQueryFormat.TIME_SERIES,
) -> P:
    """What every data panel shares: title, datasource, size, and (PromQL, legend) queries."""
    panel.title(title).description(description).datasource(DATASOURCE).span(width).height(height)
    for i, (expr, legend) in enumerate(queries):
        panel.with_target(target(expr, legend, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[i], fmt=fmt))
    return panel


def timeseries(
    title: str,
    queries: list[tuple[str, str]],
    unit: str,
    *,
    description: str = "",
    width: int = 12,
    height: int = 8,
    stack: bool = False,
) -> tb.Panel:
    """A time-series panel; ``queries`` are (PromQL, legend) pairs."""
    panel = (
        tb.Panel()
        .unit(unit)
        .draw_style(cm.GraphDrawStyle.LINE)
        .line_width(1)
        .fill_opacity(10 if stack else 0)
        .show_points(cm.VisibilityMode.NEVER)
        .span_nulls(False)
        .stacking(
            cb.StackingConfig()
            .mode(cm.StackingMode.NORMAL if stack else cm.StackingMode.NONE)
            .group("A")
        )
        .legend(
            cb.VizLegendOptions()
            .show_legend(True)
            .display_mode(cm.LegendDisplayMode.TABLE)
            .placement(cm.LegendPlacement.BOTTOM)
            .calcs(["lastNotNull"])
        )
        .tooltip(
            cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING)
        )
    )
    return _envelope(panel, title, description, queries, width, height)


def stat(
    title: str,
    expr: str,
    unit: str,
    *,
    description: str = "",
    steps: tuple[tuple[float, str], ...] = (),
    width: int = 4,
    height: int = 4,
) -> sb.Panel:
    """A single-value stat panel showing the last value; ``steps`` are (from, colour)."""
    thresholds = [dm.Threshold(value=None, color="green")]
    thresholds += [dm.Threshold(value=value, color=color) for value, color in steps]
    panel = (
        sb.Panel()
        .unit(unit)
        .decimals(2)
        .color_scheme(db.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
        .thresholds(db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(thresholds))
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
        .color_mode(cm.BigValueColorMode.VALUE)
        .graph_mode(cm.BigValueGraphMode.AREA)
        .text_mode(cm.BigValueTextMode.AUTO)
    )
    return _envelope(panel, title, description, [(expr, title)], width, height)


def heatmap(
    title: str, expr: str, *, description: str = "", width: int = 24, height: int = 8
) -> hb.Panel:
    """A heatmap of a Prometheus histogram's per-interval bucket increases."""
    panel = (
        hb.Panel()
        .calculate(False)
        .cell_gap(1)
        .color(
            hb.HeatmapColorOptions().mode(hm.HeatmapColorMode.SCHEME).scheme("Oranges").steps(64)
        )
        .y_axis(hb.YAxisConfig().unit("s"))
        .rows_frame(hb.RowsHeatmapOptions().layout(cm.HeatmapCellLayout.AUTO))
        .mode(cm.TooltipDisplayMode.SINGLE)
        .show_y_histogram()
    )
    queries = [(expr, "{{le}}")]
    return _envelope(
        panel, title, description, queries, width, height, fmt=pm.PromQueryFormat.HEATMAP
    )


def query_variable(name: str, query: str) -> db.QueryVariable:
    """A multi-value Prometheus ``label_values`` variable, "All" (``.*``) by default."""
    return (
        db.QueryVariable(name)
        .label(name)
        .datasource(DATASOURCE)
        .query({"query": query, "refId": f"{name}-var"})
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .include_all(True)
        .multi(True)
        .all_value(".*")
        .current(dm.VariableOption(selected=True, text=["All"], value=["$__all"]))
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .hide(dm.VariableHide.DONT_HIDE)
        .options([])
        .regex("")
    )


class Grid:
    """Adds rows and panels to a dashboard: ids in order, rows start a new line, panels
    flow left to right."""

    def __init__(self, dashboard: db.Dashboard) -> None:
        self.dashboard = dashboard
        self._next_id = 1
        self._x = 0
        self._y = 0
        self._line_height = 0

    def _place(self, w: int, h: int) -> tuple[int, dm.GridPos]:
        if self._x + w > GRID_WIDTH:
            self._newline()
        placed = (self._next_id, dm.GridPos(h=h, w=w, x=self._x, y=self._y))
        self._next_id += 1
        self._x += w
        self._line_height = max(self._line_height, h)
        return placed

    def _newline(self) -> None:
        self._y += self._line_height
        self._x = 0
        self._line_height = 0

    def add_row(self, title: str, panels: list[Panel]) -> None:
        """Add an expanded, full-width row header followed by its panels."""
        if self._x:
            self._newline()
        row_id, pos = self._place(GRID_WIDTH, 1)
        self.dashboard.with_row(db.Row(title).collapsed(False).id(row_id).grid_pos(pos))
        self._newline()
        for panel in panels:
            size = panel.build().grid_pos
            assert size is not None, "panels are sized by _envelope"
            panel_id, pos = self._place(size.w, size.h)
            self.dashboard.with_panel(panel.id(panel_id).grid_pos(pos))


def to_json(dashboard: db.Dashboard) -> dict[str, Any]:
    """The dashboard as a JSON-ready dict, at ``SCHEMA_VERSION``.

    The SDK's variable schema has no ``definition`` (the query text Grafana's variable
    list shows, which Grafana's UI writes on save): it is copied from each query here.
    """
    model = dashboard.build()
    model.schema_version = SCHEMA_VERSION
    out: dict[str, Any] = json.loads(JSONEncoder().encode(model))
    for var in out.get("templating", {}).get("list", []):
        if var.get("type") == "query" and isinstance(var.get("query"), dict):
            var["definition"] = var["query"]["query"]
    return out
