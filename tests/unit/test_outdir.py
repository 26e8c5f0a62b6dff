"""The run directory before the first request: writable, and room for the planned records."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmload.loadtests.options import RunOptions
from llmload.loadtests.run import outdir
from llmload.loadtests.run.phaseloop import plan_phases


def phases(**load: object) -> tuple[RunOptions, list]:
    opts = RunOptions.of(target="http://x", **load).validate()
    return opts, plan_phases(opts.load)


def test_expected_requests_follow_the_planned_load() -> None:
    # closed loop: users x phase length / pacing, every measured phase and the warm-up
    opts, plan = phases(users=10, pacing="2s", duration="60s", warmup="10s", modes="sync,stream")
    assert outdir.expected_requests(opts, plan) == 10 * (60 + 60 + 10) // 2
    opts, plan = phases(rate=5.0, duration="30s", modes="stream")
    assert outdir.expected_requests(opts, plan) == 150
    opts, plan = phases(num_prompts=40, modes="stream")
    assert outdir.expected_requests(opts, plan) == 40


def test_compression_shrinks_the_estimate_and_the_note_names_it(tmp_path: Path) -> None:
    opts, plan = phases(users=2000, pacing="0s", duration="1h", modes="stream")
    plain = outdir.expected_bytes(opts, plan)
    zst = outdir.expected_bytes(opts.with_(records_compression="zst"), plan)
    assert zst == pytest.approx(plain / 5, rel=0.01)
    note = outdir.space_note(tmp_path, opts, plan)  # terabytes: no disk here holds them
    assert note is not None and "--records-compression zst" in note
    small, plan = phases(users=1, pacing="1s", duration="1s", modes="stream")
    assert outdir.space_note(tmp_path, small, plan) is None


def test_an_unwritable_directory_is_a_sentence(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the run directory should be")
    with pytest.raises(outdir.OutDirError, match="cannot be written"):
        outdir.check(blocker / "run")
    outdir.check(tmp_path / "fine" / "run")
    assert not (tmp_path / "fine" / "run").exists()  # a run that never starts leaves none
    (tmp_path / "kept").mkdir()
    outdir.check(tmp_path / "kept")
    assert os.listdir(tmp_path / "kept") == []  # the probe is gone, the directory stays
