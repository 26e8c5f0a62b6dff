"""bench.calibration: one line of machine speed in every BENCHMARKS.md section."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import calibration, mdsection


def test_measure_gives_positive_speeds_and_a_line_that_names_them() -> None:
    cal = calibration.measure(repeat=1)
    assert cal.python_mloops_s > 0
    assert cal.matmul_gflops is None or cal.matmul_gflops > 0
    line = cal.line()
    assert line.startswith("calibration: python ")
    assert "Mloops/s" in line and "load average" in line and f"{cal.cores} cores" in line


def test_current_is_measured_once_per_process() -> None:
    assert calibration.current() is calibration.current()


def test_write_section_appends_calibration_unless_present(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixed = calibration.Calibration(1.5, 2.5, "numpy", 0.25, 0.5, 2, 0.0)
    monkeypatch.setattr(calibration, "current", lambda: fixed)
    out = tmp_path / "B.md"
    mdsection.write_section("a", "## A\nfigures", path=out)
    mdsection.write_section("b", "## B\ncalibration: measured by the bench itself", path=out)
    text = out.read_text()
    a = text.split("<!-- bench:a -->")[1].split("<!-- /bench:a -->")[0]
    b = text.split("<!-- bench:b -->")[1].split("<!-- /bench:b -->")[0]
    assert fixed.line() in a
    assert b.count("calibration:") == 1
    # rewriting a section keeps one calibration line, not one per rewrite
    mdsection.write_section("a", "## A\nnew figures", path=out)
    assert out.read_text().count(fixed.line()) == 1
