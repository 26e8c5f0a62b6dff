"""An HTML table for the self-contained pages (``report.html``, ``gate.html``)."""

from __future__ import annotations

from html import escape


def table(header: list[str], rows: list[list[str]]) -> str:
    """An HTML table; a row whose first cell is ``**bold**`` (a phase total) is emphasised."""
    head = "<tr>" + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr>" if header else ""
    body = "".join(
        ('<tr class="total">' if r[0].startswith("**") else "<tr>")
        + "".join(f"<td>{escape(c.replace('**', ''))}</td>" for c in r)
        + "</tr>"
        for r in rows
    )
    return f"<table>{head}{body}</table>"
