"""Chart data from records: CDFs, latency over time, throughput, in-flight, errors (downsampled)."""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from typing import Any

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.charts import Band, Series
from llmload.reports.stats import bin_width, downsample, ecdf_points, histogram

MAX_SCATTER = 1500
MAX_CDF_SERIES = 12
WARM = ("#d62728", "#ff7f0e", "#8c564b", "#e377c2", "#bcbd22", "#7f7f7f")
COOL = ("#1f77b4", "#2ca02c", "#17becf", "#9467bd", "#393b79", "#637939")


def origin(records: list[RequestRecord], meta: dict[str, Any] | None = None) -> float:
    """x = 0 on every time chart: the first request or the first phase start, if earlier."""
    starts = [r.started_at for r in records]
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


def ttft_cdfs(records: list[RequestRecord]) -> list[Series]:
    """TTFT empirical CDF per (mode, scenario): sync dashed in warm colours, stream in cool ones."""
    groups: dict[tuple[str, str], list[float]] = {}
    for r in records:
        if r.ok and r.ttft_s is not None:
            groups.setdefault((r.mode, r.scenario), []).append(r.ttft_s * 1000)
    out = []
    used: Counter[str] = Counter()
    for mode, scen in sorted(groups)[:MAX_CDF_SERIES]:
        colors = WARM if mode == "sync" else COOL
        color = colors[used[mode] % len(colors)]
        used[mode] += 1
        pts = ecdf_points(groups[(mode, scen)])
        out.append(Series(f"{mode} · {scen}", pts, "step", color, dashed=mode == "sync"))
    return out


def latency_over_time(records: list[RequestRecord], t0: float) -> list[Series]:
    """Scatter of TTFT and E2E (ms) against request start time, per mode."""
    out = []
    for mode in ("sync", "stream"):
        recs = [r for r in records if r.ok and r.mode == mode]
        if not recs:
            continue
        ttft = [(r.started_at - t0, r.ttft_s * 1000) for r in recs if r.ttft_s is not None]
        out.append(Series(f"{mode} TTFT", downsample(ttft, MAX_SCATTER), "scatter"))  # type: ignore[arg-type]
        if mode == "stream":
            e2e = [(r.started_at - t0, r.e2e_s * 1000) for r in recs if r.e2e_s is not None]
            out.append(Series(f"{mode} E2E", downsample(e2e, MAX_SCATTER), "scatter"))  # type: ignore[arg-type]
    colors = {"sync TTFT": "#d62728", "stream TTFT": "#1f77b4", "stream E2E": "#2ca02c"}
    for s in out:
        s.color = colors.get(s.name, "")
    return out


def _bins(records: list[RequestRecord], t0: float) -> tuple[float, int]:
    end = max(r.started_at + (r.e2e_s or 0.0) for r in records) - t0
    width = bin_width(end)
    return width, int(end // width) + 1


def throughput_and_inflight(records: list[RequestRecord], t0: float) -> tuple[Series, Series]:
    """Output tokens/s per time bin (counted at completion) and requests in flight at each bin."""
    width, nbins = _bins(records, t0)
    tokens = [0.0] * nbins
    for r in records:
        if r.output_tokens:
            tokens[int((r.started_at + (r.e2e_s or 0.0) - t0) // width)] += r.output_tokens
    starts = sorted(r.started_at - t0 for r in records)
    ends = sorted(r.started_at - t0 + (r.e2e_s or 0.0) for r in records)
    inflight = []
    for i in range(nbins):
        t = (i + 0.5) * width
        inflight.append((t, float(bisect_right(starts, t) - bisect_right(ends, t))))
    tps = [((i + 0.5) * width, tokens[i] / width) for i in range(nbins)]
    return (
        Series("output tokens/s", tps, "line", "#2ca02c"),
        Series("in-flight requests", inflight, "step", "#9467bd"),
    )


def errors_over_time(records: list[RequestRecord], t0: float) -> list[Series]:
    """Errors per time bin (by request start), one series per error class."""
    failed = [r for r in records if not r.ok]
    if not failed:
        return []
    width, nbins = _bins(records, t0)
    out = []
    for cls in sorted({r.status for r in failed}):
        counts = Counter(int((r.started_at - t0) // width) for r in failed if r.status == cls)
        out.append(
            Series(cls, [((i + 0.5) * width, float(counts[i])) for i in range(nbins)], "step")
        )
    return out


def per_token_gaps(r: RequestRecord) -> list[float]:
    """Each ITL gap divided by the tokens carried by the event that ends it."""
    tpe = r.tokens_per_event
    if len(tpe) != len(r.itl_s) + 1:
        return []
    return [gap / n for gap, n in zip(r.itl_s, tpe[1:], strict=True) if n > 0]


def distribution(values: list[float], name: str, bins: int = 40) -> Series:
    """A histogram as a step line (bin start, count)."""
    edges, counts = histogram(values, bins)
    pts = [(edges[i], float(c)) for i, c in enumerate(counts)]
    if edges:
        pts.append((edges[-1], float(counts[-1])))
    return Series(name, pts, "step")
