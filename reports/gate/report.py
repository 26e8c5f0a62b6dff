"""Gate output: plain text for the log, Markdown for ``$GITHUB_STEP_SUMMARY``, JUnit XML, JSON.

Every form carries the same headline (where it regressed, by name:
"code_gen TTFT p95 +31.0 %, the others flat") and the same table — one row per
check: baseline and run value, change, its family-wise bounds, the allowance,
the smallest change its sample would fail (``fails from``: what it can resolve),
the Holm-adjusted p-value and the sample sizes (``table_rows``).  The HTML page
is ``reports.gate.html``.
"""

from __future__ import annotations

import json
from typing import Any
from xml.etree import ElementTree as ET

from llmload.reports.gate.bootstrap import GROUPED_EFFECT
from llmload.reports.gate.metrics import REGISTRY
from llmload.reports.gate.result import FAIL, INCONCLUSIVE, PASS, SKIPPED, Check, GateResult
from llmload.reports.summary.repeats import spread_lines

ICON = {PASS: "✅", FAIL: "❌", INCONCLUSIVE: "⚠️", SKIPPED: "➖"}
HEADLINE = {
    PASS: "passed",
    FAIL: "FAILED",
    INCONCLUSIVE: "inconclusive",
}
TABLE_HEADER = [
    "check",
    "verdict",
    "baseline",
    "run",
    "change",
    "family-wise bounds",
    "allowed",
    "fails from",
    "p (Holm)",
    "samples (base / run)",
]


def _family(result: GateResult) -> int:
    return max((int(c.numbers.get("family", 0)) for c in result.checks), default=0)


def setting(result: GateResult) -> str:
    """The gate's settings in one sentence."""
    c = result.config
    if c.metric.strip().lower() == "capacity":
        return (
            f"metric capacity (where the SLO ratio crosses 1), max drop "
            f"{c.max_regression * 100:g}% at {c.confidence:.0%} confidence (bootstrap of both "
            f"searches' steps, {c.resamples} resamples, seed {c.seed})"
        )
    specs = c.specs()
    metrics = ", ".join(f"{s.name} (allowed {s.allowed_text})" for s in specs)
    m = _family(result)
    family = (
        f"Holm–Bonferroni over {m} checks, bounds simultaneous (Bonferroni)"
        if m > 1
        else "one check"
    )
    text = (
        f"{'metric' if len(specs) == 1 else 'metrics'} {metrics} at {c.confidence:.0%} "
        f"family-wise confidence ({family}; bootstrap of both samples, {c.resamples} "
        f"resamples, seed {c.seed})"
    )
    if c.max_ttft_p95_ms is not None:
        which = " (from intended send)" if c.from_intended else ""
        text += f", absolute TTFT{which} p95 limit {c.max_ttft_p95_ms:g} ms"
    return text


def _short(c: Check, modes: int) -> str:
    """``code_gen TTFT p95 +31.0%``: a check in a headline."""
    n = c.numbers
    metric = REGISTRY.get(str(n.get("metric", "")))
    if metric is None or "change_pct" not in n:
        return c.name
    label = metric.label + (f" p{n['percentile']:g}" if n.get("percentile") else "")
    scope = n.get("scope", "all")
    where = "" if scope in (None, "all") else f"{scope} "
    mode = f" ({n['mode']})" if modes > 1 and n.get("mode") else ""
    unit = " points" if n.get("kind") == "share" else "%"
    return f"{where}{label} {n['change_pct']:+.1f}{unit}{mode}"


def headline(result: GateResult) -> str:
    """Where it regressed, by name; or that nothing did; or why the gate cannot tell."""
    checks = result.counted
    modes = len({c.numbers.get("mode") for c in checks if c.numbers.get("mode")})
    fails = [c for c in checks if c.verdict == FAIL]
    if fails:
        parts = []
        for key in dict.fromkeys((c.numbers.get("metric"), c.numbers.get("mode")) for c in fails):
            group = [c for c in fails if (c.numbers.get("metric"), c.numbers.get("mode")) == key]
            whole = [c for c in group if c.numbers.get("scope") in (None, "all")]
            scoped = ", ".join(_short(c, modes) for c in group if c not in whole)
            if whole:
                parts.append(_short(whole[0], modes) + (f" ({scoped})" if scoped else ""))
            else:
                parts.append(scoped)
        rest = [c for c in checks if c.verdict != FAIL]
        noisy = [c for c in rest if c.verdict == PASS and c.numbers.get("beyond")]
        unsure = [c for c in rest if c.verdict == INCONCLUSIVE]
        tail = ", the others flat" if rest and not noisy and not unsure else ""
        if noisy:
            tail += "; within noise: " + ", ".join(_short(c, modes) for c in noisy)
        if unsure:
            tail += f"; {len(unsure)} other checks inconclusive"
        return ", ".join(parts) + tail
    if result.verdict == PASS:
        skipped = sum(c.verdict == SKIPPED for c in result.checks)
        extra = f" ({skipped} scenario checks too small to judge alone)" if skipped else ""
        return f"every check within its allowance: {len(checks)} checks{extra}"
    first = next((c for c in checks if c.verdict == INCONCLUSIVE), None)
    if first is None:
        return "no checks could run: the run and the baseline share no gated mode"
    return first.reason


def _fmt(value: Any, unit: str) -> str:
    if value is None:
        return "–"
    if unit == "%":
        return f"{float(value) * 100:.2f}%"
    if unit == "ms":
        return f"{float(value):.1f} ms"
    return f"{float(value):.4g} {unit}"


def table_rows(result: GateResult) -> list[list[str]]:
    """One row per check, in ``TABLE_HEADER``'s columns."""
    rows = []
    for c in result.checks:
        n = c.numbers
        unit = str(n.get("unit", "ms"))
        pts = " pts" if n.get("kind") == "share" else "%"
        if "ci_low_pct" in n:
            bounds = f"{n['ci_low_pct']:+.1f}{pts} … {n['ci_high_pct']:+.1f}{pts}"
        elif "limit_ms" in n:
            bounds = f"limit {n['limit_ms']:g} ms"
        else:
            bounds = "–"
        metric = REGISTRY.get(str(n.get("metric", "")))
        allowed = "–"
        if "allowed" in n and metric is not None:
            sign = "−" if metric.harm == "down" else "+"
            allowed = (
                f"+{n['allowed'] * 100:g} pts"
                if metric.kind == "share"
                else f"{sign}{n['allowed'] * 100:g}%"
            )
        base = n.get("baseline", n.get("baseline_ms"))
        run = n.get("run", n.get("run_ms"))
        rows.append(
            [
                c.name,
                f"{ICON[c.verdict]} {c.verdict}",
                _fmt(base, unit) if base is not None else "–",
                _fmt(run, unit) if run is not None else "–",
                f"{n['change_pct']:+.1f}{pts}" if "change_pct" in n else "–",
                bounds,
                allowed,
                f"{n['resolves_pct']:+.1f}{pts}" if "resolves_pct" in n else "–",
                f"{n['p_holm']:.3g}" if "p_holm" in n else "–",
                _samples(n),
            ]
        )
    return rows


def _samples(n: dict[str, Any]) -> str:
    """``8300 / 8100``, and what they count as when grouped: ``(≈ 2305 / 1980 independent)``."""
    text = f"{n.get('baseline_n', '–')} / {n.get('run_n', '–')}"
    effects = (n.get("baseline_design_effect", 1.0), n.get("run_design_effect", 1.0))
    if max(effects) > GROUPED_EFFECT:
        text += f" (≈ {n['baseline_n_effective']} / {n['run_n_effective']} independent)"
    return text


def _differences(result: GateResult) -> list[str]:
    return [
        ("blocking: " if d.get("blocking") else "noted: ") + str(d["text"])
        for d in result.differences
    ]


def render_text(result: GateResult) -> str:
    """What the gate prints: verdict, headline, settings, the table, and every reason."""
    lines = [
        f"llmload gate {HEADLINE[result.verdict]} (exit {result.exit_code}): "
        f"run {result.run_name} vs baseline {result.baseline_name}",
        f"  {headline(result)}",
        f"  {setting(result)}",
    ]
    lines += [f"  {d}" for d in _differences(result)]
    rows = table_rows(result)
    if rows:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(TABLE_HEADER)]
        lines.append(
            "  " + "  ".join(h.ljust(w) for h, w in zip(TABLE_HEADER, widths, strict=True))
        )
        lines += [
            "  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
            for r in rows
        ]
    spread = spread_lines(result.spread)
    if spread:
        lines.append("  between-run spread (each repeat's value):")
        lines += [f"    {s}" for s in spread]
    if not result.checks:
        lines.append("  no checks could run: the run and the baseline share no gated mode")
    for c in result.checks:
        lines.append(f"  [{c.verdict}] {c.reason}")
    lines += [f"  {line}" for line in result.server]
    return "\n".join(lines)


def render_markdown(result: GateResult) -> str:
    """A Markdown block suited to ``$GITHUB_STEP_SUMMARY``."""
    what = "TTFT gate" if result.config.metric.strip().lower() == "ttft" else "gate"
    out = [
        f"### {ICON[result.verdict]} llmload {what} {HEADLINE[result.verdict]}",
        f"**{headline(result)}**",
        "",
        f"Run `{result.run_name}` vs baseline `{result.baseline_name}`; {setting(result)}.",
        "",
        "| " + " | ".join(TABLE_HEADER) + " |",
        "|" + "---|" * len(TABLE_HEADER),
    ]
    out += ["| " + " | ".join(r) + " |" for r in table_rows(result)]
    out.append("")
    diffs = _differences(result)
    if diffs:
        out += ["Run vs baseline:", *[f"- {d}" for d in diffs], ""]
    spread = spread_lines(result.spread)
    if spread:
        out += ["Between-run spread:", *[f"- {s}" for s in spread], ""]
    out += [f"- {c.reason}" for c in result.checks] or ["- no checks could run"]
    out += [f"- {line}" for line in result.server]
    return "\n".join(out) + "\n"


def render_junit(result: GateResult) -> str:
    """JUnit XML: one testcase per check; fail -> failure, inconclusive -> error."""
    fails = sum(c.verdict == FAIL for c in result.checks)
    errors = sum(c.verdict == INCONCLUSIVE for c in result.checks) + (not result.checks)
    skipped = sum(c.verdict == SKIPPED for c in result.checks)
    suite = ET.Element(
        "testsuite",
        name="llmload-gate",
        tests=str(max(len(result.checks), 1)),
        failures=str(fails),
        errors=str(errors),
        skipped=str(skipped),
    )
    ET.SubElement(suite, "properties")
    for key, value in (
        ("run", result.run_name),
        ("baseline", result.baseline_name),
        ("settings", setting(result)),
        ("headline", headline(result)),
        *(("difference", d) for d in _differences(result)),
    ):
        ET.SubElement(suite[0], "property", name=key, value=value)
    for c, row in zip(result.checks, table_rows(result), strict=True):
        case = ET.SubElement(suite, "testcase", classname="llmload.gate", name=c.name)
        table = "; ".join(f"{h}: {v}" for h, v in zip(TABLE_HEADER[2:], row[2:], strict=True))
        if c.verdict == FAIL:
            ET.SubElement(case, "failure", message=c.reason, type="regression").text = c.reason
        elif c.verdict == INCONCLUSIVE:
            ET.SubElement(case, "error", message=c.reason, type="inconclusive").text = c.reason
        elif c.verdict == SKIPPED:
            ET.SubElement(case, "skipped", message=c.reason)
        ET.SubElement(case, "system-out").text = f"{c.reason}\n{table}"
    if not result.checks:
        case = ET.SubElement(suite, "testcase", classname="llmload.gate", name="gate")
        ET.SubElement(case, "error", message="no checks could run", type="inconclusive")
    suites = ET.Element("testsuites")
    suites.append(suite)
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )


def to_json(result: GateResult) -> str:
    """``gate.json``: the verdict, headline, settings, every check, differences and spread."""
    doc = {
        "verdict": result.verdict,
        "exit_code": result.exit_code,
        "run": result.run_name,
        "baseline": result.baseline_name,
        "headline": headline(result),
        "settings": setting(result),
        "checks": [
            {"name": c.name, "verdict": c.verdict, "reason": c.reason, "numbers": c.numbers}
            for c in result.checks
        ],
        "table": {"header": TABLE_HEADER, "rows": table_rows(result)},
        "differences": result.differences,
        "spread": result.spread,
    }
    return json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n"
