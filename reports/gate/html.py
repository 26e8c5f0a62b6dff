"""``gate.html``: the gate's verdict as one self-contained page (inline CSS, no script).

The headline, the settings, the table of every check (``reports.gate.report.table_rows``:
baseline and run, change, family-wise bounds, allowance, Holm p-value, samples),
what differs between the run and the baseline, the between-run spread of
repeated phases, and each check's reason.
"""

from __future__ import annotations

from html import escape

from llmload.reports.draw.htmltable import table
from llmload.reports.gate.report import (
    HEADLINE,
    TABLE_HEADER,
    headline,
    setting,
    table_rows,
)
from llmload.reports.gate.result import FAIL, INCONCLUSIVE, PASS, GateResult

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;
max-width:1240px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:24px 0 8px;border-bottom:1px solid #ddd}
.verdict{border:2px solid #bbb;border-radius:6px;padding:8px 12px;margin:12px 0;font-size:16px}
.verdict.pass{border-color:#2ca02c}.verdict.fail{border-color:#d62728}
.verdict.inconclusive{border-color:#ff7f0e}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f6f6}.muted{color:#777;font-size:12px}
"""
_CLASS = {PASS: "pass", FAIL: "fail", INCONCLUSIVE: "inconclusive"}


def render_gate_html(result: GateResult) -> str:
    """The whole gate page."""
    title = f"llmload gate {HEADLINE[result.verdict]}"
    parts = [
        f"<h1>{escape(title)} (exit {result.exit_code})</h1>",
        f'<p class="muted">run {escape(result.run_name)} vs baseline '
        f"{escape(result.baseline_name)}</p>",
        f'<div class="verdict {_CLASS[result.verdict]}" id="headline">'
        f"<b>{escape(headline(result))}</b></div>",
        f"<p>{escape(setting(result))}.</p>",
        '<h2>Every check</h2><div id="gate-table">'
        + table(TABLE_HEADER, table_rows(result))
        + "</div>",
    ]
    if result.differences:
        rows = [
            ["blocking" if d.get("blocking") else "noted", str(d["key"]), str(d["text"])]
            for d in result.differences
        ]
        parts.append(
            '<h2>Run vs baseline</h2><div id="gate-differences">'
            + table(["", "key", "difference"], rows)
            + "</div>"
        )
    if result.spread:
        rows = []
        for s in result.spread:
            for phase, value in s["phases"].items():
                rows.append(
                    [s["metric"], s["mode"], phase, "–" if value is None else f"{value:.4g}"]
                )
            pct = s.get("spread_pct")
            rows.append(
                [f"**{s['metric']}", s["mode"], "spread", "–" if pct is None else f"{pct:.1f}%"]
            )
        parts.append(
            '<h2>Between-run spread</h2><div id="gate-spread">'
            + table(["metric", "mode", "phase", "value"], rows)
            + "</div>"
        )
    parts.append(
        "<h2>Reasons</h2><ul>"
        + "".join(f"<li>[{escape(c.verdict)}] {escape(c.reason)}</li>" for c in result.checks)
        + "</ul>"
    )
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>\n"
    )
