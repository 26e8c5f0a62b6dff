"""A/B, B/A in one run: ``llmload run --target B --baseline-target A --repeat 2`` against two
bundled synthetic servers, then ``llmload report gate RUN`` with no baseline file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.ci import SERVER_ARGS, load_command
from tests.fixtures.loadtests import llmload
from tests.fixtures.server_proc import start_server_process

STARVED = "inconclusive: the load generator"


def test_interleaved_targets_are_gated_against_each_other(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    with (
        start_server_process("--ttft-ms", "240", *SERVER_ARGS) as candidate,
        start_server_process("--ttft-ms", "200", *SERVER_ARGS) as base,
    ):
        extra = ["--duration", "6s", "--warmup", "1s", "--repeat", "2"]
        cmd = load_command(out, candidate.url, extra=[*extra, "--baseline-target", base.url])
        proc = llmload(*cmd[cmd.index("run") :])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    meta = json.loads((out / "run.json").read_text())
    order = [p["name"] for p in meta["phases"]]
    assert order == [
        "warmup",
        "baseline-warmup",
        "stream-1",
        "baseline-stream-1",
        "baseline-stream-2",  # a crossover: the second pair runs the baseline first
        "stream-2",
    ]
    assert meta["baseline_target"]["server"]["from"] == "/version"
    records = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert {r["phase"] for r in records} == set(order)
    summary = json.loads((out / "summary.json").read_text())
    spread = {(r["target"], r["metric"]) for r in summary["repeats"]}
    assert ("run", "TTFT p95 ms") in spread and ("baseline", "TTFT p95 ms") in spread
    assert "between-run spread (--repeat):" in proc.stdout

    gate = llmload("report", "gate", str(out), "--metric", "ttft,itl,throughput")
    assert gate.returncode == 1 or (gate.returncode == 2 and STARVED in gate.stdout), gate.stdout
    doc = json.loads((out / "gate.json").read_text())
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["itl p95 stream"]["verdict"] != "fail"
    if gate.returncode == 1:
        assert checks["ttft p95 stream"]["verdict"] == "fail"
    # decided on the pairs of repeats (each stream-N against baseline-stream-N): the
    # synthetic servers' exact +20 % in both pairs, their differences' spread carried
    ttft = checks["ttft p95 stream"]
    assert ttft["numbers"]["method"] == "paired", ttft
    assert "2 pairs run in turn on the two targets" in ttft["reason"]
    assert 15 < ttft["numbers"]["change_pct"] < 25, ttft["numbers"]
    assert len(ttft["numbers"]["run_runs"]) == len(ttft["numbers"]["baseline_runs"]) == 2
    # the pairs' spread told apart: their phases' requests' sampling error, and the rest
    assert ttft["numbers"]["sampling_pct"] >= 0 and ttft["numbers"]["excess_pct"] >= 0
    # both repeats of each side pooled; each repeat's value listed
    assert {s["target"] for s in doc["spread"]} == {"run", "baseline"}
    assert "(same run)" in gate.stdout

    # its baseline is its own target's (the twins apart, each repeat's twin kept): what a
    # history of paired runs pools the spread of the pairs' differences from
    made = llmload("report", "baseline", str(out), "--out", str(tmp_path / "b.json"))
    assert made.returncode == 0, made.stderr
    base = json.loads((tmp_path / "b.json").read_text())
    own = [r for r in records if not r["phase"].startswith("baseline-") and r["phase"] != "warmup"]
    assert base["records"] == len(own)
    assert [t["phase"] for t in base["twins"]] == ["stream-1", "stream-2"]
    history = tmp_path / "history"
    for label in ("main-1", "main-2"):
        appended = llmload(
            "report", "baseline", str(out), "--history", str(history), "--label", label
        )
        assert appended.returncode == 0, appended.stderr
    gated = llmload("report", "gate", str(out), "--history", str(history), "--metric", "ttft")
    assert gated.returncode in (1, 2), gated.stdout
    doc = json.loads((out / "gate.json").read_text())
    (ttft,) = [c for c in doc["checks"] if c["name"] == "ttft p95 stream"]
    assert "the spread pooled with 2 earlier paired runs" in ttft["reason"], ttft["reason"]
    assert ttft["numbers"]["df"] == 3  # a degree of freedom from each run's two pairs
    assert "2 paired" in doc["baseline"]
    # `report history` of it: each run's change against its baseline target, pair by
    # pair, beside the target's own values, and what the next paired run could see
    drawn = llmload("report", "history", str(history))
    assert drawn.returncode == 0, drawn.stdout + drawn.stderr
    md = (history / "history.md").read_text()
    assert "| ttft p95 vs baseline target |" in md, md
    rows = [
        line.split("|")
        for line in md.splitlines()
        if line.startswith("| 1 |") or line.startswith("| 2 |")
    ]
    changes = [float(r[-2].strip().rstrip("%")) for r in rows]  # the run, appended twice
    assert changes == [pytest.approx(ttft["numbers"]["change_pct"], abs=0.5)] * 2, md
    assert "**ttft p95**, pair by pair: spread of the pairs' differences" in md
    assert "a run of 2 pairs gated against them fails from" in md
    assert "against the baseline target, pair by pair" in (history / "history.html").read_text()


def test_report_history_finds_where_a_build_slowed_against_its_twin(tmp_path: Path) -> None:
    """A history of paired runs whose target's own values hardly move (240 ms, the same
    server) while its baseline target's do: four builds level with their twin, then
    four 20 % slower than theirs.  `report history` marks the shift in the pairs' column,
    at the run where it began, with its size."""
    runs = {}
    with (
        start_server_process("--ttft-ms", "240", *SERVER_ARGS) as target,
        start_server_process("--ttft-ms", "240", *SERVER_ARGS) as twin,
        start_server_process("--ttft-ms", "200", *SERVER_ARGS) as faster,
    ):
        for name, base in (("level", twin), ("slower", faster)):
            runs[name] = tmp_path / name
            extra = ["--duration", "4s", "--warmup", "1s", "--repeat", "2"]
            cmd = load_command(
                runs[name], target.url, extra=[*extra, "--baseline-target", base.url]
            )
            proc = llmload(*cmd[cmd.index("run") :])
            assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    history = tmp_path / "history"
    for i, name in enumerate(["level"] * 4 + ["slower"] * 4):
        added = llmload(
            "report", "baseline", str(runs[name]), "--history", str(history), "--label", f"b{i + 1}"
        )
        assert added.returncode == 0, added.stderr
    drawn = llmload("report", "history", str(history), "--metric", "ttft")
    assert drawn.returncode == 0, drawn.stdout + drawn.stderr
    md = (history / "history.md").read_text()
    assert "- **ttft p95** vs baseline target: shifted at run 5 (b5), " in md, md
    rows = {x.split("|")[1].strip(): x.split("|") for x in md.splitlines() if x.startswith("| ")}
    assert rows["5"][-2].strip().endswith("◀ shift") and "◀" not in rows["4"][-2], md
    before, after = (float(rows[k][-2].split("%")[0]) for k in ("4", "5"))
    assert abs(before) < 5 and 15 < after < 25, md
    assert "after the shift at run 5" in (history / "history.html").read_text()


def test_repeats_with_workers_keep_every_record_and_their_spread(tmp_path: Path) -> None:
    """``--repeat 2 --workers 2``: each repeat is run by both workers, nothing is lost, and the
    summary and the gate read the repeats as one (``--baseline-target`` is one process only)."""
    out = tmp_path / "rep"
    with start_server_process("--ttft-ms", "200", *SERVER_ARGS) as server:
        extra = ["--duration", "6s", "--warmup", "1s", "--repeat", "2", "--workers", "2"]
        cmd = load_command(out, server.url, extra=extra)
        proc = llmload(*cmd[cmd.index("run") :])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    meta = json.loads((out / "run.json").read_text())
    assert [p["name"] for p in meta["phases"]] == ["warmup", "stream-1", "stream-2"]
    assert not meta.get("lost_workers")
    records = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    for name in ("stream-1", "stream-2"):
        got = [r for r in records if r["phase"] == name]
        assert {r["worker"] for r in got} == {"worker-0", "worker-1"}, name
        assert all(r["status"] == "ok" for r in got), {r["status"] for r in got}
    summary = json.loads((out / "summary.json").read_text())
    assert {r["metric"] for r in summary["repeats"]} >= {"TTFT p95 ms"}
    assert "between-run spread (--repeat):" in proc.stdout
    # a run gated against itself: both repeats pooled, no change, the spread listed
    base = tmp_path / "base.json"
    made = llmload("report", "baseline", str(out), "--out", str(base))
    assert made.returncode == 0, made.stdout + made.stderr
    gate = llmload("report", "gate", str(out), "--baseline", str(base), "--metric", "ttft,itl")
    assert gate.returncode == 0, gate.stdout[-2000:]
    doc = json.loads((out / "gate.json").read_text())
    assert {s["target"] for s in doc["spread"]} == {"run"}


def test_ci_gate_paired_keeps_a_history_of_its_pairs(tmp_path: Path) -> None:
    """``llmload ci-gate --paired --history DIR``: the pairs gated on their own while the
    history is empty, then the run added to it with each repeat's twin — what the next
    job pools its spread from (``report gate RUN --history DIR``, the test above)."""
    out, history = tmp_path / "run", tmp_path / "pairs"
    proc = llmload(
        *("ci-gate", "--paired", "--repeat", "2", "--ttft-ms", "200", "--out", str(out)),
        *("--history", str(history), "--metric", "ttft"),
    )
    assert proc.returncode in (0, 2), proc.stdout[-3000:] + proc.stderr[-2000:]
    doc = json.loads((out / "gate.json").read_text())
    (ttft,) = [c for c in doc["checks"] if c["name"] == "ttft p95 stream"]
    assert ttft["numbers"]["method"] == "paired" and ttft["verdict"] != "fail", ttft
    assert "2 pairs run in turn on the two targets" in ttft["reason"]
    (entry,) = history.glob("*.json")
    kept = json.loads(entry.read_text())
    assert [t["phase"] for t in kept["twins"]] == ["stream-1", "stream-2"]
