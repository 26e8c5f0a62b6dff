"""A run reads its options in few modules, each once: the walk from ``llmload run``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.fixtures.server_proc import ROOT, start_server_process

#: modules a run's options may enter (issue 34: "at most about a dozen")
MOST = 12


def walk(*args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fixtures.walk", "run", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith('{"rc"')]
    assert lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    return dict(json.loads(lines[-1]))


@pytest.mark.parametrize("extra", [[], ["--workers", "2"]], ids=["local", "workers"])
def test_options_enter_each_module_once(tmp_path: Path, extra: list[str]) -> None:
    with start_server_process("--ttft-ms", "20", "--itl-ms", "2") as server:
        got = walk(
            *("--target", server.url, "--users", "2", "--duration", "2s", "--warmup", "0s"),
            *("--out", str(tmp_path / "run"), "--no-report", *extra),
        )
    assert got["rc"] == 0
    modules = [m for m, _ in got["walk"]]
    twice = {m: n for m, n in Counter(modules).items() if n > 1}
    assert not twice, got["walk"]
    assert len(modules) <= MOST, modules
    # resolved once, up front: the target, the model and the context
    assert modules[:2] == ["llmload.loadtests.run.runner", "llmload.loadtests.run.context"]
    assert got["rebuilt"] == []  # no options rebuilt mid-run
    # and the run it walked is whole
    assert (tmp_path / "run" / "requests.jsonl").stat().st_size > 0
