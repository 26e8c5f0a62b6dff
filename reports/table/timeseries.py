"""Chart data from records: CDFs, latency over time, throughput, in-flight, errors (downsampled).

Read from the records' columns (``reports.table.columns``): a chart of a million records
costs arrays, not a million objects, and has as many points as one of a thousand
(scatters sampled to ``MAX_SCATTER`` points, time series in at most 240 bins, CDFs
of at most 200 points), so ``report.html``'s size does not grow with the run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.draw.charts import Band, Series
from llmload.reports.table.columns import RecordTable
from llmload.reports.table.stats import bin_width, ecdf_points, histogram

MAX_SCATTER = 1500
MAX_CDF_SERIES = 12
WARM = ("#d62728", "#ff7f0e", "#8c564b", "#e377c2", "#bcbd22", "#7f7f7f")
COOL = ("#1f77b4", "#2ca02c", "#17becf", "#9467bd", "#393b79", "#637939")


def origin(records: Sequence[RequestRecord], meta: dict[str, Any] | None = None) -> float:
    """x = 0 on every time chart: the first request or the first phase start, if earlier."""
    starts = [float(RecordTable.of(records).num("started_at").min())] if len(records) else []
    for ph in (meta or {}).get("phases") or []:
        try:
            starts.append(float(ph["started_at"]))
        except (KeyError, TypeError, ValueError):
            continue
    return min(starts)


def phase_bands(meta: dict[str, Any], t0: float) -> list[Band]:
    """One band per phase of run.json, in seconds since ``t0``."""
    bands = []
    for ph in meta.get("phases") or []:
        try:
            bands.append(
                Band(float(ph["started_at"]) - t0, float(ph["ended_at"]) - t0, str(ph["name"]))
            )
        except (KeyError, TypeError, ValueError):
            continue
    return bands


def ttft_cdfs(records: Sequence[RequestRecord]) -> list[Series]:
    """TTFT empirical CDF per (mode, scenario): sync dashed in warm colours, stream in cool ones."""
    t = RecordTable.of(records)
    ttft = t.num("ttft_s")
    timed = t.ok() & ~np.isnan(ttft)
    modes, scens = t.codes("mode")[timed], t.codes("scenario")[timed]
    values = ttft[timed] * 1000
    names_m, names_s = t.label_values("mode"), t.label_values("scenario")
    pairs = np.unique(np.stack((modes, scens)), axis=1).T.tolist() if len(modes) else []
    groups = sorted((names_m[m], names_s[c]) for m, c in pairs)
    out = []
    used: Counter[str] = Counter()
    for mode, scen in groups[:MAX_CDF_SERIES]:
        colors = WARM if mode == "sync" else COOL
        color = colors[used[mode] % len(colors)]
        used[mode] += 1
        mask = (modes == names_m.index(mode)) & (scens == names_s.index(scen))
        pts = ecdf_points(np.sort(values[mask]).tolist())
        out.append(Series(f"{mode} · {scen}", pts, "step", color, dashed=mode == "sync"))
    return out


def latency_over_time(records: Sequence[RequestRecord], t0: float) -> list[Series]:
    """Scatter of TTFT and E2E (ms) against request start time, per mode."""
    t = RecordTable.of(records)
    out = []
    for mode in ("sync", "stream"):
        sel = t.ok() & t.is_("mode", mode)
        if not sel.any():
            continue
        start = t.num("started_at")[sel] - t0
        kinds = [("TTFT", t.num("ttft_s")[sel])]
        if mode == "stream":
            kinds.append(("E2E", t.num("e2e_s")[sel]))
        for name, value in kinds:
            has = ~np.isnan(value)
            pts = _sample(start[has], value[has] * 1000, MAX_SCATTER)
            out.append(Series(f"{mode} {name}", pts, "scatter"))
    colors = {"sync TTFT": "#d62728", "stream TTFT": "#1f77b4", "stream E2E": "#2ca02c"}
    for s in out:
        s.color = colors.get(s.name, "")
    return out


def _sample(xs: np.ndarray, ys: np.ndarray, limit: int) -> list[tuple[float, float]]:
    """The points ``(xs[i], ys[i])``, every k-th so at most ``limit`` remain (in order)."""
    n = len(xs)
    if n <= limit:
        index: list[int] | np.ndarray = range(n)  # type: ignore[assignment]  # a range stands in for the index list without copying
    else:
        step = n / limit
        index = [int(i * step) for i in range(limit)]
    return list(zip(xs[index].tolist(), ys[index].tolist(), strict=True))


def _bins(t: RecordTable, t0: float) -> tuple[float, int]:
    end = float((t.num("started_at") + np.nan_to_num(t.num("e2e_s"), nan=0.0)).max()) - t0
    width = bin_width(end)
    return width, int(end // width) + 1


def throughput_and_inflight(records: Sequence[RequestRecord], t0: float) -> tuple[Series, Series]:
    """Output tokens/s per time bin (counted at completion) and requests in flight at each bin."""
    t = RecordTable.of(records)
    width, nbins = _bins(t, t0)
    start = t.num("started_at")
    end = start + np.nan_to_num(t.num("e2e_s"), nan=0.0)
    out_tokens = t.num("output_tokens")
    counted = ~np.isnan(out_tokens) & (out_tokens != 0)
    where = ((end[counted] - t0) // width).astype(np.int64)
    tokens = np.bincount(where, weights=out_tokens[counted], minlength=nbins).tolist()
    starts, ends = np.sort(start - t0), np.sort(start - t0 + np.nan_to_num(t.num("e2e_s")))
    centres = (np.arange(nbins) + 0.5) * width
    inflight = np.searchsorted(starts, centres, "right") - np.searchsorted(ends, centres, "right")
    tps = [((i + 0.5) * width, tokens[i] / width) for i in range(nbins)]
    return (
        Series("output tokens/s", tps, "line", "#2ca02c"),
        Series(
            "in-flight requests",
            list(zip(centres.tolist(), inflight.astype(float).tolist(), strict=True)),
            "step",
            "#9467bd",
        ),
    )


def errors_over_time(records: Sequence[RequestRecord], t0: float) -> list[Series]:
    """Errors per time bin (by request start), one series per error class."""
    t = RecordTable.of(records)
    failed = ~t.ok()
    if not failed.any():
        return []
    width, nbins = _bins(t, t0)
    bins = ((t.num("started_at") - t0) // width).astype(np.int64)
    out = []
    for cls in sorted(t.where(failed).distinct("status")):
        counts = np.bincount(bins[failed & t.is_("status", cls)], minlength=nbins).tolist()
        out.append(
            Series(cls, [((i + 0.5) * width, float(counts[i])) for i in range(nbins)], "step")
        )
    return out


def per_token_gaps(r: RequestRecord) -> list[float]:
    """Each ITL gap divided by the tokens carried by the event that ends it."""
    return RecordTable.of([r]).per_token_gaps().tolist()


def distribution(
    values: Sequence[float] | np.ndarray,
    name: str,
    bins: int = 40,
    scale: float = 1.0,
    inplace: bool = False,
) -> Series:
    """A histogram of the values times ``scale`` as a step line (bin start, count);
    ``inplace``: an array of the caller's own, used up here."""
    edges, counts = histogram(values, bins, scale, inplace)
    pts = [(edges[i], float(c)) for i, c in enumerate(counts)]
    if edges:
        pts.append((edges[-1], float(counts[-1])))
    return Series(name, pts, "step")
