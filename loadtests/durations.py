"""The one duration parser (``"250ms"``, ``"3s"``, ``"5m"``, ``"1h"``, ``"1m30s"`` or seconds)
and the one fraction parser (``"10%"`` or ``"0.1"``)."""

from __future__ import annotations

import contextlib
import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: str | float | int) -> float:
    """``"250ms"``, ``"3s"``, ``"5m"``, ``"1h"``, ``"1m30s"`` or a number of seconds."""
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"negative duration {value!r}")
        return float(value)
    text = value.strip().lower()
    with contextlib.suppress(ValueError):
        return parse_duration(float(text))
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h)", text)
    if not parts or re.sub(r"\s+", "", text) != "".join(n + u for n, u in parts):
        raise ValueError(f"bad duration {value!r} (use e.g. 500ms, 3s, 5m, 1h)")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def parse_fraction(value: str | float | int) -> float:
    """``"10%"`` or ``"0.1"`` (or a number) -> 0.1; ``ValueError`` unless in [0, 1]."""
    if isinstance(value, int | float):
        out = float(value)
    else:
        text = value.strip()
        try:
            out = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
        except ValueError:
            raise ValueError(f"bad fraction {value!r} (use e.g. 5% or 0.05)") from None
    if not 0.0 <= out <= 1.0:
        raise ValueError(f"fraction {value!r} is outside 0..1 (0%..100%)")
    return out


def parse_span(spec: str) -> tuple[float, float | None]:
    """``"START:END"`` -> seconds (each a ``parse_duration``; START empty: 0, END empty: None)."""
    start_s, sep, end_s = spec.partition(":")
    if not sep:
        raise ValueError(f"expected START:END (e.g. 60:120, 1m:2m or 30s:), got {spec!r}")
    start = parse_duration(start_s) if start_s.strip() else 0.0
    end = parse_duration(end_s) if end_s.strip() else None
    if end is not None and end <= start:
        raise ValueError(f"START must come before END, got {spec!r}")
    return start, end
