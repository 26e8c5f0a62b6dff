"""Settings: flags beat env beat defaults; validation; every field is a flag."""

from __future__ import annotations

from dataclasses import fields

import pytest

from llmload.target_server.settings import Settings, build_parser, parse_settings


def test_defaults_env_and_flags():
    assert parse_settings([], env={}) == Settings()
    env = {"LLMLOAD_PORT": "9001", "LLMLOAD_ITL_MS": "7.5", "LLMLOAD_API_KEY": "k-env"}
    s = parse_settings(["--itl-ms", "3"], env=env)
    assert (s.port, s.itl_ms, s.api_key) == (9001, 3.0, "k-env")
    assert parse_settings(["--api-key", "k-flag"], env=env).api_key == "k-flag"


def test_every_field_is_a_flag_and_key_never_shown():
    parser = build_parser({"LLMLOAD_API_KEY": "hunter2"})
    flags = {a.dest for a in parser._actions}
    assert {f.name for f in fields(Settings)} <= flags
    assert "hunter2" not in parser.format_help()
    assert "hunter2" not in repr(parse_settings([], env={"LLMLOAD_API_KEY": "hunter2"}))


@pytest.mark.parametrize(
    "argv",
    [
        ["--engine", "nope"],
        ["--device", "tpu"],
        ["--fail-rate", "1.5"],
        ["--max-queue", "-1"],
        ["--port", "eighty"],
        ["--ui", "tk"],
    ],
)
def test_invalid_values_exit_2(argv):
    with pytest.raises(SystemExit) as exc:
        parse_settings(argv, env={})
    assert exc.value.code == 2


def test_with_overrides_validates():
    assert Settings().with_overrides(ttft_ms=1).ttft_ms == 1
    with pytest.raises(ValueError):
        Settings().with_overrides(batching="sometimes")
