"""Number and table formatting shared by every text report (Markdown, terminal, HTML)."""

from __future__ import annotations

from html import escape


def fmt_ms(value: float | None) -> str:
    """Milliseconds as a short readable number."""
    if value is None:
        return "–"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"


def fmt_rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def fmt_num(value: float | None) -> str:
    """A measured quantity to three significant figures (``412``, ``1.23``, ``0.0451``)."""
    if value is None:
        return "–"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def fmt_pct(value: float | None) -> str:
    """An improvement: ``↓77%`` when streaming is faster, ``↑12%`` when slower."""
    if value is None:
        return "–"
    return f"↓{value:.0f}%" if value >= 0 else f"↑{-value:.0f}%"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def html_table(header: list[str], rows: list[list[str]]) -> str:
    """The same table in HTML (cells escaped)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"
