"""The ``llmload`` command table: dispatch, help, unknown commands, registration."""

from __future__ import annotations

import sys

import pytest

from llmload import cli


def test_usage_lists_every_command_and_exits_0_with_help(capsys: pytest.CaptureFixture[str]):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("run", "loadtest", "worker", "serve", "report", "ci-gate", "dashboards"):
        assert f"\n  {name} " in out
    assert cli.main([]) == 2  # no command: usage, as argparse does


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["lodtest"]) == 2
    assert "unknown command 'lodtest'" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("llmload ")


def test_dispatch_passes_prefix_and_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    module = type(sys)("fake_llmload_cmd")
    module.main = lambda argv: calls.append(argv) or 7  # type: ignore[attr-defined]  # an attribute the stubs do not declare
    monkeypatch.setitem(sys.modules, "fake_llmload_cmd", module)
    monkeypatch.setattr(cli, "COMMANDS", dict(cli.COMMANDS))
    cli.register("fake", "a test command", "fake_llmload_cmd:main", ("sub",))
    assert cli.main(["fake", "--x", "1"]) == 7 and calls == [["sub", "--x", "1"]]
    with pytest.raises(ValueError, match="registered twice"):
        cli.register("fake", "again", "fake_llmload_cmd:main")


def test_report_help_goes_to_the_reports_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["report", "gate", "--help"])
    assert done.value.code == 0 and "--inconclusive" in capsys.readouterr().out
