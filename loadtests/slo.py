"""Service-level objectives for goodput: ``--slo ttft=600ms,tpot=50ms,e2e=5s``.

The one parser for both spellings: ours (``NAME=DURATION``, comma separated,
a bare number is milliseconds) and vLLM ``bench serve``'s ``--goodput``
(``NAME:MILLISECONDS``, space separated, ``e2el`` for end-to-end).  A request is
*good* when it succeeded and every configured metric is within its bound;
goodput is good requests per second of the phase (``reports.summary.make``).  It
lives here, below ``reports``, so ``loadtests run`` refuses a bad spec before
the run rather than after it.
"""

from __future__ import annotations

import re

from llmload.loadtests.durations import parse_duration

#: defaults (milliseconds): first token within 600 ms (the seeds' target), 50 ms per
#: output token after it, whole answer within 5 s.
DEFAULT_SLO_MS: dict[str, float] = {"ttft": 600.0, "tpot": 50.0, "e2e": 5000.0}
DEFAULT_SLO = "ttft=600ms,tpot=50ms,e2e=5s"
METRICS = ("ttft", "tpot", "e2e")
#: vLLM's names for ours
_ALIASES = {"e2el": "e2e"}


def parse_duration_ms(text: str) -> float:
    """``"600ms"`` -> 600.0, ``"5s"`` -> 5000.0; a bare number is milliseconds."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        try:
            return parse_duration(text) * 1000.0
        except ValueError:
            raise ValueError(f"not a duration: {text!r} (use e.g. 600ms, 5s)") from None
    if value < 0 or value != value:
        raise ValueError(f"not a duration: {text!r} (use e.g. 600ms, 5s)")
    return value


def parse_slo(spec: str | None) -> dict[str, float]:
    """SLO bounds in milliseconds by metric; ``None`` -> the defaults.

    ``"ttft=600ms,e2e=5s"`` and ``"ttft:600 e2el:5000"`` (vLLM ``--goodput``) both
    give ``{"ttft": 600.0, "e2e": 5000.0}``.
    """
    if spec is None:
        return dict(DEFAULT_SLO_MS)
    out: dict[str, float] = {}
    for part in filter(None, re.split(r"[,\s]+", spec)):
        name, sep, value = part.partition("=") if "=" in part else part.partition(":")
        name = _ALIASES.get(name.strip().lower(), name.strip().lower())
        if not sep or name not in METRICS:
            raise ValueError(
                f"bad SLO {part!r}: expected NAME=DURATION or NAME:MS with NAME in "
                f"{', '.join(METRICS)} (e2el is e2e)"
            )
        if name in out:
            raise ValueError(f"SLO {name!r} given twice in {spec!r}")
        out[name] = parse_duration_ms(value)
    if not out:
        raise ValueError(f"empty SLO spec {spec!r}")
    return out


def format_slo(slo: dict[str, float]) -> str:
    """The spec string back: ``ttft=600ms,tpot=50ms``."""
    return ",".join(f"{k}={v:g}ms" for k, v in slo.items())
