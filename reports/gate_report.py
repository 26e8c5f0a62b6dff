"""Gate output: plain text for the log, Markdown for ``$GITHUB_STEP_SUMMARY``, JUnit XML."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from llmload.reports.gate import FAIL, INCONCLUSIVE, PASS, GateResult

ICON = {PASS: "✅", FAIL: "❌", INCONCLUSIVE: "⚠️"}
HEADLINE = {
    PASS: "passed",
    FAIL: "FAILED",
    INCONCLUSIVE: "inconclusive",
}


def _setting(result: GateResult) -> str:
    c = result.config
    if c.metric == "capacity":
        return (
            f"metric capacity (where the SLO ratio crosses 1), max drop "
            f"{c.max_regression * 100:g}% at {c.confidence:.0%} confidence (bootstrap of both "
            f"searches' steps, {c.resamples} resamples, seed {c.seed})"
        )
    text = (
        f"metric {c.label}, p{c.percentile:g}, max regression +{c.max_regression * 100:g}% "
        f"at {c.confidence:.0%} confidence (bootstrap of both samples, {c.resamples} resamples, "
        f"seed {c.seed})"
    )
    if c.max_ttft_p95_ms is not None:
        which = " (from intended send)" if c.from_intended else ""
        text += f", absolute TTFT{which} p95 limit {c.max_ttft_p95_ms:g} ms"
    return text


def render_text(result: GateResult) -> str:
    """What the gate prints: verdict, why, and the numbers."""
    lines = [
        f"llmload gate {HEADLINE[result.verdict]} (exit {result.exit_code}): "
        f"run {result.run_name} vs baseline {result.baseline_name}",
        f"  {_setting(result)}",
    ]
    if not result.checks:
        lines.append("  no checks could run: the run and the baseline share no gated mode")
    for c in result.checks:
        lines.append(f"  [{c.verdict}] {c.reason}")
    lines += [f"  {line}" for line in result.server]
    return "\n".join(lines)


def render_markdown(result: GateResult) -> str:
    """A Markdown block suited to ``$GITHUB_STEP_SUMMARY``."""
    out = [
        f"### {ICON[result.verdict]} llmload TTFT gate {HEADLINE[result.verdict]}",
        f"Run `{result.run_name}` vs baseline `{result.baseline_name}`; {_setting(result)}.",
        "",
        "| check | verdict | baseline (ms) | run (ms) | change | CI | samples (base / run) |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in result.checks:
        n = c.numbers

        def num(key: str, fmt: str = "{:.1f}", n: dict = n) -> str:
            return fmt.format(n[key]) if n.get(key) is not None else "–"

        ci = (
            f"{n['ci_low_pct']:+.1f}% … {n['ci_high_pct']:+.1f}%"
            if "ci_low_pct" in n
            else (f"limit {n['limit_ms']:g} ms" if "limit_ms" in n else "–")
        )
        out.append(
            f"| {c.name} | {ICON[c.verdict]} {c.verdict} | {num('baseline_ms')} | "
            f"{num('run_ms')} | {num('change_pct', '{:+.1f}%')} | {ci} | "
            f"{n.get('baseline_n', '–')} / {n.get('run_n', '–')} |"
        )
    out.append("")
    out += [f"- {c.reason}" for c in result.checks] or ["- no checks could run"]
    out += [f"- {line}" for line in result.server]
    return "\n".join(out) + "\n"


def render_junit(result: GateResult) -> str:
    """JUnit XML: one testcase per check; fail -> failure, inconclusive -> error."""
    fails = sum(c.verdict == FAIL for c in result.checks)
    errors = sum(c.verdict == INCONCLUSIVE for c in result.checks) + (not result.checks)
    suite = ET.Element(
        "testsuite",
        name="llmload-gate",
        tests=str(max(len(result.checks), 1)),
        failures=str(fails),
        errors=str(errors),
    )
    ET.SubElement(suite, "properties")
    for key, value in (
        ("run", result.run_name),
        ("baseline", result.baseline_name),
        ("settings", _setting(result)),
    ):
        ET.SubElement(suite[0], "property", name=key, value=value)
    for c in result.checks:
        case = ET.SubElement(suite, "testcase", classname="llmload.gate", name=c.name)
        if c.verdict == FAIL:
            ET.SubElement(case, "failure", message=c.reason, type="regression").text = c.reason
        elif c.verdict == INCONCLUSIVE:
            ET.SubElement(case, "error", message=c.reason, type="inconclusive").text = c.reason
        else:
            ET.SubElement(case, "system-out").text = c.reason
    if not result.checks:
        case = ET.SubElement(suite, "testcase", classname="llmload.gate", name="gate")
        ET.SubElement(case, "error", message="no checks could run", type="inconclusive")
    suites = ET.Element("testsuites")
    suites.append(suite)
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )
