"""``python -m llmload.loadtests loadtest`` with the bundled server: it never outlives the run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.fixtures.loadtests import ROOT, loadtests_cmd


@pytest.mark.timeout(90)
def test_second_ctrl_c_leaves_no_bundled_server(tmp_path: Path) -> None:
    cmd = loadtests_cmd(
        "loadtest",
        "--engine",
        "synthetic",
        "--users",
        "2",
        "--duration",
        "60s",
        "--out",
        str(tmp_path / "run"),
    )
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    server: psutil.Process | None = None
    try:
        assert proc.stderr is not None
        seen: list[str] = []
        for line in proc.stderr:  # the run has begun once the harness names its target
            seen.append(line)
            if line.startswith("llmload: "):
                break
        m = re.search(r"bundled server: http://127\.0\.0\.1:(\d+)", "".join(seen))
        assert m, seen
        servers = [
            p
            for p in psutil.Process(proc.pid).children(recursive=True)
            if "llmload.target_server" in p.cmdline()
        ]
        assert len(servers) == 1, servers
        server = servers[0]
        # the server is in a session of its own: the terminal's Ctrl-C never reaches it
        assert os.getsid(server.pid) == server.pid
        proc.send_signal(signal.SIGINT)  # the run stops; its report is then built
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("run directory: "):
                break
        # impatient, the user presses Ctrl-C again: that one exits at once, no cleanup
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
        gone, alive = psutil.wait_procs([server], timeout=5)
        assert not alive, f"bundled server {server.pid} outlived the load generator"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if server is not None and server.is_running():
            server.kill()
