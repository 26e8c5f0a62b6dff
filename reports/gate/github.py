"""The gate on GitHub Actions: annotations, step outputs and the step summary.

``publish(result, markdown, env)`` does what the environment asks for:

* ``$GITHUB_STEP_SUMMARY`` set: append the Markdown verdict table;
* ``$GITHUB_OUTPUT`` set: append ``verdict``, ``exit_code``, ``headline`` (where it
  regressed, by name) and the primary check's (the first metric over all requests of
  the first mode) ``mode``, ``ratio``, ``ratio_low``, ``ratio_high``, ``baseline_ms``,
  ``run_ms`` (empty when it did not get as far as a ratio), for later steps as
  ``steps.<id>.outputs.<name>``;
* ``$GITHUB_ACTIONS`` is ``true``: print one ``::error::`` workflow command per
  failed check and one ``::warning::`` per inconclusive check, so the reason
  shows on the pull request and not only in the log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TextIO

from llmload.reports.gate.report import headline
from llmload.reports.gate.result import FAIL, INCONCLUSIVE, Check, GateResult

TITLE = "llmload gate"


def _escape_data(text: str) -> str:
    """A workflow command's message (GitHub's rules: %, CR and LF are escaped)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    """A workflow command's property value (also ``:`` and ``,``)."""
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation_lines(result: GateResult) -> list[str]:
    """``::error``/``::warning`` lines for the failed and inconclusive checks."""
    level = {FAIL: "error", INCONCLUSIVE: "warning"}
    lines = []
    for c in result.checks:
        if c.verdict in level:
            title = _escape_property(f"{TITLE}: {c.name}")
            lines.append(f"::{level[c.verdict]} title={title}::{_escape_data(c.reason)}")
    if not result.checks:
        lines.append(
            f"::warning title={_escape_property(TITLE)}::no checks could run: "
            "the run and the baseline share no gated mode"
        )
    return lines


def primary(result: GateResult) -> Check | None:
    """The first check that got as far as a ratio (the one the outputs describe)."""
    return next((c for c in result.checks if "ratio" in c.numbers), None)


def outputs(result: GateResult) -> dict[str, str]:
    """The step outputs: the verdict, the exit code, the headline, the primary ratio."""
    out = {
        "verdict": result.verdict,
        "exit_code": str(result.exit_code),
        "headline": headline(result).replace("\n", " "),
    }
    check = primary(result)
    n = check.numbers if check else {}

    def ratio(key: str) -> str:
        return f"{n[key]:.4f}" if key in n else ""

    out.update(
        mode=str(n.get("mode", "")),
        ratio=ratio("ratio"),
        ratio_low=ratio("ratio_low"),
        ratio_high=ratio("ratio_high"),
        baseline_ms=f"{n['baseline_ms']:.2f}" if "baseline_ms" in n else "",
        run_ms=f"{n['run_ms']:.2f}" if "run_ms" in n else "",
    )
    return out


def publish(result: GateResult, markdown: str, env: Mapping[str, str], stdout: TextIO) -> None:
    """Step summary, step outputs and annotations, each when ``env`` says we are on Actions."""
    if env.get("GITHUB_STEP_SUMMARY"):
        with open(env["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as fh:
            fh.write(markdown)
    if env.get("GITHUB_OUTPUT"):
        with open(env["GITHUB_OUTPUT"], "a", encoding="utf-8") as fh:
            fh.writelines(f"{k}={v}\n" for k, v in outputs(result).items())
    if env.get("GITHUB_ACTIONS") == "true":
        for line in annotation_lines(result):
            print(line, file=stdout)
