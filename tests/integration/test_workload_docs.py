"""The copy-paste command docs/loadgen.md gives for each of the field's workloads works as
written against the bundled server, and its report shows what the workload is for."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "loadgen.md"


def workload_commands() -> list[str]:
    """Every ``llmload loadtest ... --dataset prefix|agent|trace`` line of docs/loadgen.md."""
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    lines = [ln.strip() for b in blocks for ln in b.splitlines()]
    return [
        ln for ln in lines if re.match(r"llmload loadtest .*--dataset (prefix|agent|trace)", ln)
    ]


def test_each_workload_has_its_command() -> None:
    kinds = sorted({re.search(r"--dataset (\w+)", c).group(1) for c in workload_commands()})  # type: ignore[union-attr]  # the test's input makes it present
    assert kinds == ["agent", "prefix", "trace"]


@pytest.mark.parametrize("command", workload_commands())
def test_the_documented_command_works(command: str, tmp_path: Path) -> None:
    argv = shlex.split(command)
    assert argv[:2] == ["llmload", "loadtest"]
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "llmload", *argv[1:], "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    phase = summary["phases"]["stream"]
    assert phase["count"] > 0 and phase["ok"] == phase["count"]
    dataset = re.search(r"--dataset (\w+)", command).group(1)  # type: ignore[union-attr]  # the test's input makes it present
    if dataset == "prefix" or "mooncake" in command:
        block = phase["prefix_cache"]  # the bundled server's cache served the shared prefixes
        assert (
            block["hit_rate"] > 0.3 and block["ttft_hit_ms"]["p50"] < block["ttft_miss_ms"]["p50"]
        )
    if dataset == "agent":
        assert phase["agent"]["complete"] > 0
    if dataset == "trace":
        assert "ttft_from_intended_ms" in phase
