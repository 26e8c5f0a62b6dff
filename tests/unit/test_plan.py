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
    assert opts.load.users == 9 and opts.load.spawn_rate == 2 and opts.load.pacing == 2.0
    assert opts.load.duration == 60 and opts.load.modes == ["stream"]
    assert opts.connection.header == ["X-Team: infra", "X-Run: a"]
    assert opts.load.shape == {"kind": "steps", "start": 1}
    assert build_options({}, {}).load.modes == ["sync", "stream"]


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
    opts = RunOptions.of(
        target="https://bob:hunter2@api.example/llm?api-key=s3cret&v=1",
        header=["Authorization: Bearer s3cret", "X-Team: infra"],
        api_key_env="MY_KEY",
    ).validate()
    text = repr(opts.config())
    assert "hunter2" not in text and "s3cret" not in text
    assert "X-Team: infra" in text and "MY_KEY" in text and "v=1" in text


def test_target_keeps_the_prefix_and_query_and_accepts_a_v1_base() -> None:
    from llmload.loadtests.options import ConnectionOptions
    from llmload.loadtests.transport.target import Target

    for url in ("https://h.example/qwen", "https://h.example/qwen/v1/", "h.example/qwen"):
        target = Target(ConnectionOptions(target=url + "?api-version=2"), {})
        with target.httpx_client() as client:
            req = client.build_request("POST", "/v1/chat/completions")
        assert req.url.path == "/qwen/v1/chat/completions"
        assert req.url.params["api-version"] == "2"


def test_api_key_comes_from_the_environment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from llmload.loadtests.transport.target import Target

    monkeypatch.setenv("MY_KEY", "s3cret")
    opts = RunOptions.of(target="http://h", api_key_env="MY_KEY", header=["X-A: 1"]).validate()
    target = Target.from_options(opts.connection)
    assert target.headers == {"X-A": "1", "Authorization": "Bearer s3cret"}
    explicit = RunOptions.of(target="http://h", api_key_env="MY_KEY", header=["authorization: x"])
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
    assert opts.load.modes == ["stream"] and opts.connection.header == ["A: b", "C: d"]
    assert opts.output.report is False and opts.load.pacing == 0 and opts.load.users == 7
    assert opts.distributed.workers == 2


def test_each_option_is_declared_once_and_validate_returns_a_new_frozen_value() -> None:
    import dataclasses

    from llmload.loadtests.options import DECLARED, GROUPS, Spec

    grouped = [f.name for g in GROUPS.values() for f in dataclasses.fields(g)]
    assert len(grouped) == len(set(grouped)) == len(DECLARED)  # one group each, once
    assert [f.name for f in dataclasses.fields(RunOptions)] == list(GROUPS)
    assert all(isinstance(d.spec, Spec) and d.spec.help for d in DECLARED.values())
    with pytest.raises(TypeError, match="unknown run option"):
        RunOptions.of(userz=3)
    raw = RunOptions.of(pacing="2s", modes="stream", header="X-Team: infra")
    opts = raw.validate()
    assert raw.load.pacing == "2s" and opts.load.pacing == 2.0 and opts.load.modes == ["stream"]
    assert opts.load.pacing == 2.0 and opts.connection.headers_dict() == {"X-Team": "infra"}
    assert opts.output.report is True and opts.distributed.workers == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.load.users = 3  # type: ignore[misc]  # a frozen value or an untyped base, on purpose


def test_a_new_declaration_is_a_flag_a_plan_key_and_a_docs_row(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Adding an option is one declaration: the parser, the plan and the docs table follow."""
    import dataclasses

    from llmload.loadtests import options
    from llmload.loadtests.run import cli as run_cli

    @dataclasses.dataclass(frozen=True)
    class Extra:
        """A group a future issue might add."""

        think_time: float = options.option(
            0.0, "pause between turns", parse=options._duration, shown="0s", compare=options.BLOCKS
        )

    groups = {**options.GROUPS, "extra": Extra}
    monkeypatch.setattr(options, "GROUPS", groups)
    monkeypatch.setattr(options, "DECLARED", {d.name: d for d in options.declared()})
    monkeypatch.setattr(run_cli, "DECLARED", options.DECLARED)
    ns = run_cli.parser().parse_args(["run", "--think-time", "2s"])
    assert vars(ns)["think_time"] == "2s"
    sub = run_cli.parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]  # the test's input makes it present
    assert "pause between turns (0s)" in " ".join(sub.format_help().split())
    assert "| `--think-time D` | 0s | blocks | pause between turns |" in options.options_table()
    plan = tmp_path / "p.toml"
    plan.write_text('think-time = "1s"\n')
    assert options.load_plan(plan) == {"think_time": "1s"}


def test_docs_table_is_the_declarations() -> None:
    """docs/loadgen.md's option table is ``options_table()`` (LLMLOAD_UPDATE_DOCS=1 rewrites)."""
    import os

    from llmload.loadtests.options import options_table

    doc = Path(__file__).resolve().parents[2] / "docs" / "loadgen.md"
    text = doc.read_text(encoding="utf-8")
    begin, end = "<!-- run-options: begin -->\n", "<!-- run-options: end -->"
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    fresh = head + begin + options_table() + end + tail
    if os.environ.get("LLMLOAD_UPDATE_DOCS"):
        doc.write_text(fresh, encoding="utf-8")
    assert begin in text and text == fresh, "run: LLMLOAD_UPDATE_DOCS=1 pytest " + __file__


def test_the_http1_clients_old_name_still_reads() -> None:
    # plans written when the client was called "lean" keep working
    opts = RunOptions.of(target="http://x", http_client="lean").validate()
    assert opts.connection.http_client == "http1"
    with pytest.raises(ValueError, match="--http-client must be one of http1, httpx"):
        RunOptions.of(target="http://x", http_client="fast").validate()
