"""``loadtests.recordfile``: requests.jsonl plain or compressed; a killed run's file still reads."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from llmload.loadtests import recordfile
from llmload.loadtests.recordfile import RecordFile, read_lines


@pytest.mark.parametrize("compression", recordfile.COMPRESSIONS)
def test_lines_round_trip(tmp_path: Path, compression: str) -> None:
    f = RecordFile(tmp_path, compression)
    lines = [f'{{"i": {i}, "pad": "{"x" * (i % 700)}"}}' for i in range(3000)]
    for line in lines:
        f.write(line)
    f.close()
    assert recordfile.find(tmp_path) == f.path
    assert [b.decode() for b in read_lines(f.path)] == lines


@pytest.mark.parametrize("compression", ["gz", "zst"])
def test_a_killed_runs_file_reads_up_to_its_last_flush(tmp_path: Path, compression: str) -> None:
    (tmp_path / "a").mkdir()
    f = RecordFile(tmp_path / "a", compression)
    for i in range(100):
        f.write(f'{{"i": {i}}}')
    f.flush()
    f.write('{"i": 100}')  # after the last flush: lost with the process
    killed = tmp_path / f"killed{recordfile.SUFFIX[compression]}"
    shutil.copy(f.path, killed)  # the file as the killed process left it: no end of stream
    f.close()
    assert [b.decode() for b in read_lines(killed)] == [f'{{"i": {i}}}' for i in range(100)]


def test_a_new_run_replaces_the_old_runs_file(tmp_path: Path) -> None:
    old = RecordFile(tmp_path, "zst")
    old.write("{}")
    old.close()
    new = RecordFile(tmp_path, "none")
    new.close()
    assert recordfile.find(tmp_path) == tmp_path / "requests.jsonl"
    assert not (tmp_path / "requests.jsonl.zst").exists()
