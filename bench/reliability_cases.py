"""The cases behind RELIABILITY.md: each runs real processes and returns one ``Row``.

The drivers are the ones the reliability tests assert on
(``tests/fixtures/reliability.py``, ``tests/fixtures/server_abuse.py``); here
they run bigger and are counted instead of asserted.  ``lost`` is what the
harness or the server failed to account for: requests issued minus records
written (harness rows), requests sent minus requests the server counted
(server rows).  Target: 0 everywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SRV = "python -m llmload.target_server --port 0"
#: the same app in the bench process (uvicorn on a thread), so its engine and slots can be read
SRV_INPROC = "target server in-process (uvicorn thread)"
RUN = "python -m llmload.loadtests run --target URL"


@dataclass
class Row:
    """One line of the table."""

    case: str
    tried: int  # faults injected / bad inputs sent / clients
    requests: int  # requests issued in the case
    survived: bool
    lost: int
    evidence: str
    command: str


#: where the cases' run directories go (``bench.reliability.main`` sets and removes it)
TMP_ROOT: Path | None = None


def _tmp() -> Path:
    return Path(tempfile.mkdtemp(prefix="llmload-rel-", dir=TMP_ROOT))


def synthetic_fault(knob: str, client_class: str, seconds: int) -> Row:
    """One fault knob at 30 %, a sync then a stream phase: injected per the server,
    recorded per the harness, mode by mode."""
    from bench.faults import (
        as_client_classes,
        free_port,
        run_loadtests,
        server_statuses,
    )
    from bench.procs import start_server_process

    server_args = ["--ttft-ms", "20", "--itl-ms", "10", knob, "0.3", "--stall-s", "3"]
    run_args = [
        "--users",
        "10",
        "--spawn-rate",
        "50",
        "--pacing",
        "0.2s",
        "--duration",
        f"{seconds}s",
        "--max-tokens",
        "16",
        "--ignore-eos",
        "--modes",
        "sync,stream",
        "--stall-timeout",
        "1s",
    ]
    served: dict[str, Counter[str]] = {}
    with start_server_process(*server_args, "--log-level", "warning") as server:
        run = run_loadtests(
            _tmp() / "run", "--target", server.url, *run_args, metrics_port=free_port()
        )
        time.sleep(0.5)
        for mode in ("sync", "stream"):
            served[mode] = server_statuses(server.url, stream=mode == "stream")
    mismatch, parts = 0, []
    for mode in ("sync", "stream"):
        got = Counter(r["status"] for r in run.records if r["mode"] == mode)
        mapped = as_client_classes(served[mode], mode)
        mismatch += sum(((mapped - got) + (got - mapped)).values())
        faults = ", ".join(f"{n} `{k}`" for k, n in sorted(got.items()) if k != "ok") or "all `ok`"
        server_side = ", ".join(f"{n} `{k}`" for k, n in sorted(served[mode].items()) if k != "ok")
        parts.append(f"{mode}: {faults} (server: {server_side or 'none'})")
    injected = sum(n for c in served.values() for k, n in c.items() if k != "ok")
    issued = sum(sum(c.values()) for c in served.values())
    drawn = client_class in run.report_error_classes()
    errors = Counter({k: n for k, n in run.classes.items() if k != "ok"})
    summarised = run.summary_errors() == errors
    exported = run.exporter_counts() == Counter((r["mode"], r["status"]) for r in run.records)
    survived = run.rc == 0 and run.run_json.get("status") == "completed" and drawn and summarised
    survived = survived and exported
    return Row(
        f"target fault `{knob}` 0.3",
        injected,
        issued,
        survived and mismatch == 0,
        abs(issued - len(run.records)),
        "; ".join(parts) + f"; classes off by {mismatch}; in the report's chart: {drawn}; "
        f"exporter's `llmload_requests_total` agrees: {exported}",
        f"`{SRV} {' '.join(server_args)}` + `{RUN} {' '.join(run_args)} --metrics-port P`",
    )


def kill_restart(rounds: int) -> Row:
    """SIGKILL the target with every user mid-stream, restart it on the same port."""
    from bench.faults import kill_and_restart

    users, lost, requests, disconnects, connects, ok_after = 4, 0, 0, 0, 0, 0
    survived = True
    run_args = (
        "--spawn-rate",
        "50",
        "--pacing",
        "0.5s",
        "--duration",
        "9s",
        "--max-tokens",
        "30",
        "--ignore-eos",
        "--modes",
        "stream",
    )
    for _ in range(rounds):
        got = kill_and_restart(
            _tmp() / "kill", ("--ttft-ms", "50", "--itl-ms", "50"), run_args, users=users
        )
        recs = got.run.records
        classes = Counter(r["status"] for r in recs)
        accounted = (
            sum(got.before_kill.values())
            + got.running_at_kill
            + classes["connect"]
            + sum(got.after_restart.values())
        )
        lost += abs(accounted - len(recs))
        requests += len(recs)
        disconnects += classes["disconnect"]
        connects += classes["connect"]
        ok_after += sum(1 for r in recs if r["status"] == "ok" and r["started_at"] > got.up_at)
        survived &= got.run.rc == 0 and classes["disconnect"] == got.running_at_kill
    return Row(
        "target SIGKILLed mid-stream, restarted on the same port",
        rounds,
        requests,
        survived,
        lost,
        f"{disconnects} `disconnect` (= streams in flight at the kill), {connects} `connect` "
        f"while down, {ok_after} `ok` after the restart",
        "`llmload serve --port P --ttft-ms 50 --itl-ms 50`, `kill -9`, same again + "
        f"`{RUN} --users {users} {' '.join(run_args)}`",
    )


def nginx_case(kind: str) -> Row:
    """Real nginx: 502 with the upstream dead, 504/cut stream with a slow upstream."""
    from bench.faults import (
        free_port,
        nginx_read_timeout,
        nginx_upstream_errors,
        run_loadtests,
        server_statuses,
    )
    from bench.nginx import start_nginx
    from bench.procs import start_server_process

    tmp = _tmp()
    args = [
        "--users",
        "4",
        "--spawn-rate",
        "50",
        "--pacing",
        "0.3s",
        "--duration",
        "3s",
        "--max-tokens",
        "8",
    ]
    if kind == "502":
        proxy = start_nginx(
            f"http://127.0.0.1:{free_port()}", buffering=False, gzip=False, workdir=tmp
        )
        try:
            # every request fails: --max-error-rate 100% keeps the exit code about the run itself
            run = run_loadtests(
                tmp / "run", "--target", proxy.url, "--model", "m", *args, "--max-error-rate", "1"
            )
            logged = sum(nginx_upstream_errors(proxy).values())
        finally:
            proxy.stop()
        want = {("http_5xx", 502)}
        server_count, case = logged, "nginx 502: upstream dead"
        command = f"nginx → closed port + `{RUN} --model m {' '.join(args)}`"
    else:
        with start_server_process("--ttft-ms", "2500", "--log-level", "warning") as server:
            with nginx_read_timeout(1):
                proxy = start_nginx(server.url, buffering=False, gzip=False, workdir=tmp)
            try:
                # every request fails here too (504 or a cut stream): the exit code is the run's
                run = run_loadtests(
                    tmp / "run", "--target", proxy.url, *args, "--max-error-rate", "1"
                )
            finally:
                proxy.stop()
            time.sleep(0.3)
            server_count = server_statuses(server.url)["cancelled"]
        want = {("http_5xx", 504), ("disconnect", 200)}
        case = "nginx 504: upstream slower than `proxy_read_timeout 1s`"
        command = f"`{SRV} --ttft-ms 2500` behind nginx + `{RUN} {' '.join(args)}`"
    got = {(r["status"], r["http_status"]) for r in run.records}
    by = Counter(f"{r['mode']} {r['status']} {r['http_status']}" for r in run.records)
    return Row(
        case,
        len(run.records),
        len(run.records),
        run.rc == 0 and got == want and server_count == len(run.records),
        abs(server_count - len(run.records)),
        ", ".join(f"{n} {k}" for k, n in sorted(by.items()))
        + f"; counted upstream: {server_count}",
        command,
    )


def server_started(**overrides: Any) -> Any:
    """An in-process server (``start_server_thread``) with quiet logs."""
    from llmload.target_server.serving import start_server_thread

    return start_server_thread(log_level="warning", **overrides)


def _tmpfs(size: str, *options: str) -> Path | None:
    """A small tmpfs of our own (None where this machine cannot mount one)."""
    point = _tmp()
    opts = ",".join((f"size={size}", *options))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(point)], check=False)
    return point if done.returncode == 0 else None


def own_disk_fills(rounds: int) -> Row:
    """The run directory on a 512 KiB tmpfs: the records fill it mid-run.  The run must
    stop within seconds, exit 4, say why, and keep a file of whole records that its
    run.json and report agree with."""
    from bench.procs import start_server_process

    run_args = "--users 8 --spawn-rate 100 --pacing 0s --duration 60s --modes stream"
    tried, ok, lost, notes = 0, 0, 0, []
    with start_server_process("--ttft-ms", "2", "--itl-ms", "1", "--log-level", "warning") as srv:
        for _ in range(rounds):
            point = _tmpfs("512k")
            if point is None:
                return Row("the run's own disk fills", 0, 0, False, 0, "cannot mount", "")
            try:
                began = time.monotonic()
                cmd = [sys.executable, "-m", "llmload.loadtests", "run", "--target", srv.url]
                cmd += [*run_args.split(), "--max-tokens", "32", "--out", str(point / "run")]
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                took = time.monotonic() - began
                meta = json.loads((point / "run" / "run.json").read_text())
                text = (point / "run" / "requests.jsonl").read_text()
                whole = text.endswith("\n") and all(json.loads(x) for x in text.splitlines())
                kept = len(text.splitlines())
            finally:
                subprocess.run(["umount", "-l", str(point)], check=False)
            tried += 1
            good = (
                proc.returncode == 4
                and meta["status"] == "failed"
                and whole
                and meta["records"] == kept
                and "Traceback" not in proc.stdout + proc.stderr
                and took < 30
            )
            ok += good
            lost += abs(meta["records"] - kept)
            notes.append(f"exit {proc.returncode} after {took:.1f} s, {kept} whole records")
    return Row(
        "the run's own disk fills (512 KiB tmpfs)",
        tried,
        tried,
        ok == tried,
        lost,
        "; ".join(notes) + "; run.json `failed` with `failure.class` output, records = lines",
        f"`{RUN} {run_args} --max-tokens 32 --out TMPFS/run`",
    )


def unwritable_out() -> Row:
    """``--out`` on a read-only filesystem: refused with exit 2 before the target is asked."""
    point = _tmpfs("64k", "ro")
    if point is None:
        return Row("`--out` read-only", 0, 0, False, 0, "cannot mount", "")
    try:
        cmd = [sys.executable, "-m", "llmload.loadtests", "run", "--target", "http://127.0.0.1:9"]
        proc = subprocess.run([*cmd, "--out", str(point / "run")], capture_output=True, text=True)
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)
    good = proc.returncode == 2 and "cannot be written" in proc.stderr
    good = good and "Traceback" not in proc.stderr and "cannot reach" not in proc.stderr
    return Row(
        "`--out` on a read-only filesystem",
        1,
        0,
        good,
        0,
        f"exit {proc.returncode}: "
        + (proc.stderr.strip().splitlines()[-1] if proc.stderr else "").replace(str(point), "RO"),
        f"`{RUN.replace('URL', 'http://127.0.0.1:9')} --out RO/run`",
    )
