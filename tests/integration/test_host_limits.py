"""Many streams meet the host's limits: a clear line at start-up, not a wall of EMFILE.

``llmload run`` with more users than ``ulimit -n`` allows (the limit lowered for
the child process, soft and hard, so it cannot raise it itself) exits 2 before
its first user starts, naming the limit and the command that raises it — it
used to start and record one ``connect`` error ("Too many open files") after
another.  When only the soft limit is low it raises it and runs.  The bundled
server says at start-up what its open-file limit lets it hold.
"""

from __future__ import annotations

import resource
import subprocess
from collections.abc import Callable
from pathlib import Path

from llmload.target_server.launch import launch
from tests.fixtures.loadtests import ROOT, loadtests_cmd
from tests.fixtures.server_proc import ServerProcess


def _limited(soft: int, hard: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return apply


def _run(out: Path, url: str, users: int, soft: int, hard: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        loadtests_cmd(
            *("run", "--out", str(out), "--no-report", "--target", url),
            *("--users", str(users), "--spawn-rate", str(users), "--pacing", "1s"),
            *("--duration", "1s", "--modes", "stream", "--max-tokens", "2"),
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limited(soft, hard),
    )


def test_too_few_open_files_is_one_clear_line(
    start_server_proc: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = start_server_proc("--ttft-ms", "5", "--itl-ms", "2")
    res = _run(tmp_path / "run", server.url, users=600, soft=400, hard=400)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "--users 600 needs about 856 open files" in res.stderr
    assert "ulimit -n 856" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "run").exists()  # stopped before any user or run file


def test_a_low_soft_limit_is_raised(
    start_server_proc: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = start_server_proc("--ttft-ms", "5", "--itl-ms", "2")
    res = _run(tmp_path / "run", server.url, users=600, soft=400, hard=4096)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "open files" not in res.stderr


def test_the_server_says_what_its_limit_holds() -> None:
    with launch(["--ttft-ms", "5"], cwd=ROOT, preexec_fn=_limited(1024, 1024)) as proc:
        assert any("open files limited to 1024" in line for line in proc.log), proc.tail(10)
