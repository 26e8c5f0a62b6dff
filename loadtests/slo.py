"""Service-level objectives for goodput: ``ttft=600ms,tpot=50ms,e2e=5s``."""

from __future__ import annotations

import re

#: defaults (milliseconds): first token within 600 ms (the seeds' target), 50 ms per
#: output token after it, whole answer within 5 s.
DEFAULT_SLO_MS: dict[str, float] = {"ttft": 600.0, "tpot": 50.0, "e2e": 5000.0}
DEFAULT_SLO = "ttft=600ms,tpot=50ms,e2e=5s"
METRICS = ("ttft", "tpot", "e2e")
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(us|µs|ms|s|m)?\s*$")
_UNIT_MS = {"us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60000.0, None: 1.0}


def parse_duration_ms(text: str) -> float:
    """``"600ms"`` -> 600.0, ``"5s"`` -> 5000.0; a bare number is milliseconds."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"not a duration: {text!r} (use e.g. 600ms, 5s)")
    return float(m.group(1)) * _UNIT_MS[m.group(2)]


def parse_slo(spec: str | None) -> dict[str, float]:
    """``"ttft=600ms,e2e=5s"`` -> ``{"ttft": 600.0, "e2e": 5000.0}``; ``None`` -> the defaults."""
    if spec is None:
        return dict(DEFAULT_SLO_MS)
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, value = part.partition("=")
        name = name.strip().lower()
        if not sep or name not in METRICS:
            raise ValueError(f"bad SLO {part!r}: expected NAME=DURATION with NAME in {METRICS}")
        out[name] = parse_duration_ms(value)
    if not out:
        raise ValueError(f"empty SLO spec {spec!r}")
    return out


def format_slo(slo: dict[str, float]) -> str:
    """The spec string back: ``ttft=600ms,tpot=50ms``."""
    return ",".join(f"{k}={v:g}ms" for k, v in slo.items())
