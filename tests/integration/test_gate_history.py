"""A baseline as a history: `report baseline --history`, `report gate --history`, `report history`.

On the path users run: short `llmload run`s against two bundled synthetic servers
(the same build, and one whose TTFT is 50 % slower), each appended to a history
folder, then gated against it and drawn run by run.  Checks that the verdict is
decided on the spread between runs (gate.json says so, with its degrees of
freedom), that a slower build fails and an unchanged one passes, that a history
of one run says its between-run variance is unknown, that corrupt entries and
entries of another workload are skipped and named, and that `report history`
finds the run where the shift began.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.procs import start_server_process
from llmload.target_server.launch import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
#: long enough that a run's TTFT p95 holds within a few % on a loaded 2-core machine (2 s
#: runs spread 10 % there beside other jobs, and the unchanged build came out inconclusive)
LOAD = (
    *("--users", "6", "--spawn-rate", "60", "--pacing", "0.05s"),
    *("--duration", "4s", "--warmup", "0.5s"),
)


def llmload(*args: str | Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "llmload", *map(str, args)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, ServerProcess]]:
    common = ("--itl-ms", "2", "--jitter-ms", "3", "--log-level", "warning")
    with (
        start_server_process("--ttft-ms", "40", *common) as same,
        start_server_process("--ttft-ms", "60", *common) as slow,
    ):
        yield {"same": same, "slow": slow}


@pytest.fixture(scope="module")
def runs(servers: dict[str, ServerProcess], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Seven runs of the same build, then three of the slower one; a history of the first five."""
    tmp = tmp_path_factory.mktemp("history")
    made: dict[str, Path] = {}
    for name, which in [*((f"a{i}", "same") for i in range(7)), ("b0", "slow"), ("b1", "slow")]:
        out = tmp / name
        run = llmload(
            "run",
            "--target",
            servers[which].url,
            *LOAD,
            "--modes",
            "stream",
            "--max-tokens",
            "8",
            "--out",
            out,
            "--no-report",
            "--status-interval",
            "60",
        )
        assert run.returncode == 0, run.stderr[-2000:]
        made[name] = out
    history = tmp / "hist"
    for i in range(5):
        added = llmload(
            "report", "baseline", made[f"a{i}"], "--history", history, "--label", f"build-{i}"
        )
        assert added.returncode == 0, added.stderr
    return {"dir": tmp, "history": history, **made}


def gate(run: Path, *args: str | Path) -> tuple[int, str, dict]:
    done = llmload("report", "gate", run, *args)
    return done.returncode, done.stdout + done.stderr, json.loads((run / "gate.json").read_text())


def test_an_unchanged_build_passes_against_the_spread_between_runs(runs: dict) -> None:
    code, out, doc = gate(runs["a5"], "--history", runs["history"])
    assert code == 0, out
    (check,) = [c for c in doc["checks"] if c["numbers"].get("method") == "run-level"]
    assert len(check["numbers"]["baseline_runs"]) == 5 and check["numbers"]["df"] == 4
    assert "5 baseline runs, 1 run(s)" in out and "degrees of freedom" in out
    # and what it could have caught, from the spread these runs had
    n = check["numbers"]
    assert n["resolves_pct"] > 10 and 0 < n["power_at_twice_allowed"] <= 1
    assert "of the time" in out and f"fails from +{n['resolves_pct']:.1f}%" in out
    if n["power_at_twice_allowed"] < 0.95:  # then it says what would see +20 %
        assert n["history_runs_needed"] or n["run_repeats_needed"] or "must come down" in out


def test_a_slower_build_fails_across_runs(runs: dict) -> None:
    code, out, doc = gate(runs["b0"], "--history", runs["history"])
    assert code == 1, out
    assert "worse beyond allowed +10% across runs" in out


def test_one_run_on_each_side_says_the_between_run_variance_is_unknown(runs: dict) -> None:
    one = runs["dir"] / "one"
    assert llmload("report", "baseline", runs["a0"], "--history", one).returncode == 0
    code, out, doc = gate(runs["a6"], "--history", one)
    assert code in (0, 2), out
    assert "between-run variance unknown (1 baseline run, 1 run)" in out
    assert any(d["key"] == "between_run_variance" for d in doc["differences"])
    # the same with a plain baseline file
    base = runs["dir"] / "base.json"
    assert llmload("report", "baseline", runs["a0"], "--out", base).returncode == 0
    code, out, _ = gate(runs["a6"], "--baseline", base)
    assert "between-run variance unknown" in out


def test_corrupt_and_incomparable_entries_are_skipped_and_named(runs: dict) -> None:
    mixed = runs["dir"] / "mixed"
    mixed.mkdir()
    for f in runs["history"].glob("*.json"):
        (mixed / f.name).write_bytes(f.read_bytes())
    (mixed / "zz-broken.json").write_text("{not json")
    other = json.loads(next(runs["history"].glob("*.json")).read_text())
    other["run"]["config"]["max_tokens"] = 64
    other["created_at"] = "1999-01-01T00:00:00Z"
    (mixed / "00-other.json").write_text(json.dumps(other))
    before = sorted(p.read_bytes() for p in mixed.iterdir())
    code, out, doc = gate(runs["a6"], "--history", mixed)
    assert code == 0, out
    assert "skipped 1 unreadable entries: zz-broken.json" in out
    assert "left out 1 runs not comparable with this one: 00-other.json (--max-tokens" in out
    assert sorted(p.read_bytes() for p in mixed.iterdir()) == before  # read, never changed


def test_history_marks_the_run_where_the_shift_began(runs: dict) -> None:
    drift = runs["dir"] / "drift"
    for i, name in enumerate(("a0", "a1", "a2", "a3", "b0", "b1", "b0", "b1")):
        label = f"build-{i}"
        assert (
            llmload(
                "report", "baseline", runs[name], "--history", drift, "--label", label
            ).returncode
            == 0
        )
    done = llmload("report", "history", drift)
    assert done.returncode == 0, done.stderr
    md = (drift / "history.md").read_text()
    assert "**ttft p95**: shifted at run 5 (build-4)" in md, md
    assert "◀ shift" in md and (drift / "history.html").read_text().count("<svg") >= 1
    # and what a gate against it can see, from the 4 runs since the shift
    assert "**ttft p95**: run-to-run spread" in md and "over the last 4 runs since the shift" in md
    assert "one run gated against them fails from +" in md and "of the time" in md
