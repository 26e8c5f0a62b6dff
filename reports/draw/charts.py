"""Inline SVG charts (no JavaScript, no network): lines, steps, scatter, phase bands."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from html import escape

PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
    "#393b79",
    "#637939",
)
BAND_COLORS = {"warmup": "#eeeeee", "sync": "#fde9d9", "stream": "#e3eefa"}


@dataclass
class Series:
    """One named series of ``(x, y)`` points drawn as ``line``, ``step`` or ``scatter``."""

    name: str
    points: list[tuple[float, float]]
    kind: str = "line"
    color: str = ""
    dashed: bool = False


@dataclass
class Band:
    """A shaded x-range (a run phase) behind the data."""

    x0: float
    x1: float
    label: str


@dataclass
class Axes:
    title: str
    x_label: str
    y_label: str
    chart_id: str
    series: list[Series] = field(default_factory=list)
    bands: list[Band] = field(default_factory=list)
    width: int = 600
    height: int = 280
    y_zero: bool = True
    note: str = ""
    #: logarithmic x axis (positive x only), for latencies spanning more than a decade
    x_log: bool = False


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 5 × 10^k steps) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    ticks = [math.floor(lo / step) * step]
    while ticks[-1] < hi - step * 1e-9:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    """1, 2, 5 × 10^k ticks from the last one at or below ``lo`` to the first at or above ``hi``."""
    lo = max(lo, 1e-9)
    hi = max(hi, lo)
    k0, k1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    ticks = [round(m * 10.0**k, 12) for k in range(k0, k1 + 1) for m in (1, 2, 5)]
    first = max(i for i, t in enumerate(ticks) if t <= lo)
    last = min(i for i, t in enumerate(ticks) if t >= hi)
    return ticks[first : max(last, first + 1) + 1]


def _fmt_tick(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def render(ax: Axes) -> str:
    """The ``<figure class="chart">`` holding one chart as inline SVG."""
    pts = [p for s in ax.series for p in s.points]
    if not pts:
        note = escape(ax.note or "No data for this chart.")
        return (
            f'<figure class="chart empty" id="{ax.chart_id}"><figcaption>{escape(ax.title)}'
            f"</figcaption><p class=muted>{note}</p></figure>"
        )
    xs = [p[0] for p in pts] + [b.x0 for b in ax.bands] + [b.x1 for b in ax.bands]
    ys = [p[1] for p in pts]
    log = ax.x_log and min(xs) > 0
    # a log axis starts a little below the data so the leftmost curve does not hug the frame
    x_ticks = log_ticks(min(xs) / 1.15, max(xs)) if log else nice_ticks(min(xs), max(xs))
    y_ticks = nice_ticks(0.0 if ax.y_zero else min(ys), max(ys))
    x_lo, x_hi = x_ticks[0], x_ticks[-1]
    y_lo, y_hi = y_ticks[0], y_ticks[-1]
    left, right, top, bottom = 60, 16, 12, 44
    pw, ph = ax.width - left - right, ax.height - top - bottom

    def sx(x: float) -> float:
        if log:
            span = math.log10(x_hi) - math.log10(x_lo) or 1.0
            return left + (math.log10(max(x, x_lo)) - math.log10(x_lo)) / span * pw
        return left + (x - x_lo) / (x_hi - x_lo or 1.0) * pw

    def sy(y: float) -> float:
        return top + ph - (y - y_lo) / (y_hi - y_lo or 1.0) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {ax.width} {ax.height}" '
        f'role="img" aria-label="{escape(ax.title)}" data-chart="{ax.chart_id}">'
    ]
    for b in ax.bands:
        color = BAND_COLORS.get(b.label, "#f3f3f3")
        bx, bw, label = sx(b.x0), max(sx(b.x1) - sx(b.x0), 1), escape(b.label)
        out.append(
            f'<rect class="band" x="{bx:.1f}" y="{top}" width="{bw:.1f}" height="{ph}" '
            f'fill="{color}"><title>{label}</title></rect>'
            f'<text x="{bx + 3:.1f}" y="{top + 11}" class="bandlabel">{label}</text>'
        )
    for t in y_ticks:
        out.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" class="grid"/>'
            f'<text x="{left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{_fmt_tick(t)}</text>'
        )
    for t in x_ticks:
        out.append(
            f'<text x="{sx(t):.1f}" y="{top + ph + 16}" text-anchor="middle">{_fmt_tick(t)}</text>'
        )
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="frame"/>')
    for i, s in enumerate(ax.series):
        color = s.color or PALETTE[i % len(PALETTE)]
        out.append(_series_svg(s, color, sx, sy))
    out.append(
        f'<text x="{left + pw / 2}" y="{ax.height - 6}" text-anchor="middle" class="axis">'
        f"{escape(ax.x_label)}</text>"
        f'<text transform="translate(14 {top + ph / 2}) rotate(-90)" text-anchor="middle" '
        f'class="axis">{escape(ax.y_label)}</text>'
    )
    legend = "".join(
        f'<span><i style="background:{s.color or PALETTE[i % len(PALETTE)]}"></i>'
        f"{escape(s.name)}</span>"
        for i, s in enumerate(ax.series)
    )
    out.append("</svg>")
    note = f'<div class="legend">{legend}</div>'
    note += f'<p class="note">{escape(ax.note)}</p>' if ax.note else ""
    return (
        f'<figure class="chart" id="{ax.chart_id}"><figcaption>{escape(ax.title)}</figcaption>'
        + "".join(out)
        + note
        + "</figure>"
    )


def _series_svg(
    s: Series, color: str, fx: Callable[[float], float], fy: Callable[[float], float]
) -> str:
    if s.kind == "scatter":
        dots = "".join(f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="1.6"/>' for x, y in s.points)
        return f'<g class="series scatter" fill="{color}" fill-opacity="0.55">{dots}</g>'
    coords: list[str] = []
    prev_y: float | None = None
    for x, y in s.points:
        if s.kind == "step" and prev_y is not None:
            coords.append(f"{fx(x):.1f},{fy(prev_y):.1f}")
        coords.append(f"{fx(x):.1f},{fy(y):.1f}")
        prev_y = y
    dash = ' stroke-dasharray="5 3"' if s.dashed else ""
    return (
        f'<polyline class="series {s.kind}" fill="none" stroke="{color}" stroke-width="1.6"'
        f'{dash} points="{" ".join(coords)}"><title>{escape(s.name)}</title></polyline>'
    )
