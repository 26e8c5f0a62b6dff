"""Run options: durations, TOML plans vs flags, validation (redaction: test_redact.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmload.loadtests.options import (
    RunOptions,
    build_options,
    load_plan,
    parse_duration,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3s", 3), ("5m", 300), ("250ms", 0.25), ("1h", 3600), ("1m30s", 90), ("2.5", 2.5), (7, 7)],
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "3x", "s", "-1", "3s junk"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_plan_then_flags_override(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(
        'target = "http://h:8000"\nusers = 5\npacing = "2s"\nspawn-rate = 2\n'
        'modes = ["stream"]\nheader = ["X-Team: infra"]\n[shape]\nkind = "steps"\nstart = 1\n',
        encoding="utf-8",
    )
    plan = load_plan(plan_file)
    opts = build_options(plan, {"users": 9, "header": ["X-Run: a"], "duration": "1m"})
    assert opts.users == 9 and opts.spawn_rate == 2 and opts.pacing == 2.0
    assert opts.duration == 60 and opts.modes == ["stream"]
    assert opts.header == ["X-Team: infra", "X-Run: a"]
    assert opts.shape == {"kind": "steps", "start": 1}
    assert build_options({}, {}).modes == ["sync", "stream"]


def test_unknown_plan_keys_are_refused(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text("userz = 5\n", encoding="utf-8")
    with pytest.raises(ValueError, match="userz"):
        load_plan(plan_file)


@pytest.mark.parametrize(
    "cli",
    [
        {"modes": "sync,batch"},
        {"arrival": "bursty"},
        {"users": 0},
        {"rate": 5, "turns": 2},
        {"header": ["no-colon"]},
        {"duration": "0s"},
        # a worker without a user would hold its share of the prompts back forever
        {"num_prompts": 10, "users": 1, "workers": 2},
        {"num_prompts": 10, "users": 2, "master": True, "expect_workers": 3},
    ],
)
def test_invalid_options(cli: dict) -> None:
    with pytest.raises(ValueError):
        build_options({}, cli)


def test_config_never_holds_secrets() -> None:
    opts = RunOptions(
        target="https://bob:hunter2@api.example/llm?api-key=s3cret&v=1",
        header=["Authorization: Bearer s3cret", "X-Team: infra"],
        api_key_env="MY_KEY",
    ).validate()
    text = repr(opts.config())
    assert "hunter2" not in text and "s3cret" not in text
    assert "X-Team: infra" in text and "MY_KEY" in text and "v=1" in text


def test_target_keeps_the_prefix_and_query_and_accepts_a_v1_base() -> None:
    from llmload.loadtests.transport.target import Target

    for url in ("https://h.example/qwen", "https://h.example/qwen/v1/", "h.example/qwen"):
        target = Target(url + "?api-version=2", {})
        with target.httpx_client() as client:
            req = client.build_request("POST", "/v1/chat/completions")
        assert req.url.path == "/qwen/v1/chat/completions"
        assert req.url.params["api-version"] == "2"


def test_api_key_comes_from_the_environment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from llmload.loadtests.transport.target import Target

    monkeypatch.setenv("MY_KEY", "s3cret")
    opts = RunOptions(target="http://h", api_key_env="MY_KEY", header=["X-A: 1"]).validate()
    target = Target.from_options(opts.connection)
    assert target.headers == {"X-A": "1", "Authorization": "Bearer s3cret"}
    explicit = RunOptions(target="http://h", api_key_env="MY_KEY", header=["authorization: x"])
    assert Target.from_options(explicit.validate().connection).headers == {"authorization": "x"}
    monkeypatch.delenv("MY_KEY")
    with pytest.raises(ValueError, match="MY_KEY"):
        Target.from_options(opts.connection)


def test_command_line_flags_reach_the_options() -> None:
    from llmload.loadtests.run.cli import parser

    ns = parser().parse_args(
        ["run", "--target", "http://h", "--modes", "stream", "--header", "A: b"]
        + ["--header", "C: d", "--no-report", "--pacing", "0s", "--workers", "2"]
    )
    given = vars(ns)
    assert given.pop("command") == "run" and given.pop("log_level") == "WARNING"
    assert "users" not in given  # unset flags stay unset, so a plan's value survives
    opts = build_options({"users": 7}, given)
    assert opts.modes == ["stream"] and opts.header == ["A: b", "C: d"]
    assert opts.report is False and opts.pacing == 0 and opts.workers == 2 and opts.users == 7


def test_every_option_is_in_a_group_and_validate_returns_a_new_frozen_value() -> None:
    import dataclasses

    from llmload.loadtests.options import GROUPS

    grouped = [f.name for g in GROUPS.values() for f in dataclasses.fields(g)]
    names = [f.name for f in dataclasses.fields(RunOptions)]
    shared = {"seed"}  # fixes both the arrivals (load) and the prompts (workload)
    assert sorted(set(names) - set(grouped)) == [], "add the new option to a group in plan.py"
    assert sorted(set(grouped) - set(names)) == []
    assert [n for n in set(grouped) if grouped.count(n) > 1 and n not in shared] == []
    types = {f.name: f.type for f in dataclasses.fields(RunOptions)}
    assert {
        f"{g.__name__}.{f.name}": f.type
        for g in GROUPS.values()
        for f in dataclasses.fields(g)
        if f.type != types[f.name]
    } == {}
    raw = RunOptions(pacing="2s", modes="stream", header="X-Team: infra")  # type: ignore[arg-type]
    opts = raw.validate()
    assert raw.pacing == "2s" and opts.pacing == 2.0 and opts.modes == ["stream"]
    assert opts.load.pacing == 2.0 and opts.connection.headers_dict() == {"X-Team": "infra"}
    assert opts.output.report is True and opts.distributed.workers == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.users = 3  # type: ignore[misc]
