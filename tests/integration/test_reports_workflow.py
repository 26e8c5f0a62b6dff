"""The example GitHub Actions workflow is valid against the github-workflows schema."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "reports" / "examples" / "github-ttft-gate.yml"


def check(path: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("check-jsonschema")
    cmd = [str(exe), "--builtin-schema", "vendor.github-workflows", str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_example_workflow_validates() -> None:
    proc = check(WORKFLOW)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = WORKFLOW.read_text()
    assert "llmload ci-gate" in text and "GITHUB_STEP_SUMMARY" in text
    # the slim core (no torch, no make install) and only the permission it uses
    assert "pip install .\n" in text and "make install" not in text
    block = text.split("permissions:", 1)[1].split("\njobs:", 1)[0]
    granted = [ln.strip() for ln in block.splitlines() if ln.strip()]
    assert [ln for ln in granted if not ln.startswith("#")] == ["contents: read"]


def test_schema_check_rejects_a_broken_workflow(tmp_path: Path) -> None:
    # control: the same check must fail on a workflow with no jobs' steps
    bad = tmp_path / "bad.yml"
    bad.write_text("name: x\non: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps: 3\n")
    assert check(bad).returncode != 0
