"""Only comparable runs: the fingerprint, its differences, and the gate's refusal."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llmload.loadtests.options import BLOCKS, COMPARE, DECLARED, IGNORED, option
from llmload.reports.cli import main
from llmload.reports.gate.fingerprint import (
    BLOCKING,
    KEYS,
    check_allowed,
    comparability,
    fingerprint,
)
from tests.fixtures.reports import make_records, write_run

T0 = 1_700_000_000.0


def run_json(**over: Any) -> dict[str, Any]:
    config = {
        "users": 8,
        "rate": None,
        "pacing": 0.0,
        "max_tokens": 16,
        "scenario": "short_qa",
        "modes": ["stream"],
        "ignore_eos": False,
        "tokenizer": None,
        "duration": 10.0,
        "warmup": 2.0,
        **over.pop("config", {}),
    }
    meta = {
        "model": "llmload-synthetic",
        "protocol": "openai-chat",
        "config": config,
        "workload": {"scenario": "short_qa", "prompts_sha256": "abc", "dataset": None},
        "versions": {"llmload": "0.1.0"},
        "host": {"hostname": "vm", "cpus": 2},
        "server": {"version": "0.1.0", "from": "/version"},
        "calibration": {"python_mloops_s": 18.0},
    }
    meta.update(over)
    return meta


def diffs(base: dict, run: dict, allow: tuple[str, ...] = ()) -> dict[str, Any]:
    return {d.key: d for d in comparability(fingerprint(run), fingerprint(base), allow)}


def test_same_settings_differ_in_nothing() -> None:
    assert comparability(fingerprint(run_json()), fingerprint(run_json())) == []
    fp = fingerprint(run_json())
    assert (
        fp["rate"] == "closed loop" and fp["modes"] == "stream" and fp["server_version"] == "0.1.0"
    )


@pytest.mark.parametrize(
    ("over", "key", "text"),
    [
        ({"config": {"max_tokens": 32}}, "max_tokens", "--max-tokens: baseline 16, run 32"),
        ({"model": "other-model"}, "model", "target model: baseline llmload-synthetic, run other"),
        (
            {"config": {"scenario": "code_gen"}},
            "scenario",
            "--scenario: baseline short_qa, run code",
        ),
        ({"server": {"version": "0.2.0"}}, "server_version", "server version: baseline 0.1.0"),
        ({"config": {"users": 16}}, "users", "--users: baseline 8, run 16"),
        ({"config": {"ignore_eos": True}}, "ignore_eos", "--ignore-eos: baseline False, run True"),
    ],
)
def test_a_difference_that_moves_the_metric_blocks(over: dict, key: str, text: str) -> None:
    got = diffs(run_json(), run_json(**over))
    assert got[key].blocking and got[key].text.startswith(text)
    allowed = diffs(run_json(), run_json(**over), allow=(key,))
    assert not allowed[key].blocking and "allowed by --allow-difference" in allowed[key].text


def test_noted_differences_never_block() -> None:
    got = diffs(
        run_json(),
        run_json(
            versions={"llmload": "0.2.0"},
            calibration={"python_mloops_s": 8.0},
            host={"hostname": "ci", "cpus": 4},
            config={"duration": 30.0},
        ),
    )
    assert set(got) == {"llmload_version", "calibration", "host", "duration"}
    assert not any(d.blocking for d in got.values())
    # a calibration within 25 % is the same machine speed (day-to-day noise)
    assert diffs(run_json(), run_json(calibration={"python_mloops_s": 20.0})) == {}


def test_what_a_side_does_not_record_is_unknown_not_different() -> None:
    old = run_json()
    del old["server"], old["calibration"]
    got = diffs(old, run_json())
    assert got["server_version"].text == "server version: not recorded in the baseline (unknown)"
    assert not any(d.blocking for d in got.values())
    # open loop: the schedule sets the pace, --pacing is not compared
    a = run_json(config={"rate": 5.0, "pacing": 3.0})
    b = run_json(config={"rate": 5.0, "pacing": 0.0})
    assert diffs(a, b) == {}


def test_allow_difference_takes_a_key_or_its_flag_and_names_the_known_ones() -> None:
    assert check_allowed(["max-tokens", "--prefix-len", "model"]) == [
        "max_tokens",
        "prefix_len",
        "model",
    ]
    with pytest.raises(ValueError, match="unknown key 'duration'; one of model, server_version"):
        check_allowed(["duration"])  # noted: it never blocks, so there is nothing to allow


def test_every_option_says_what_a_difference_does_to_a_comparison() -> None:
    # the declaration is the one list: an option without a class cannot be declared, and
    # the fingerprint reads every option that is not ignored
    assert [n for n, d in DECLARED.items() if d.spec.compare not in COMPARE] == []
    with pytest.raises(TypeError, match="compare must be one of"):
        option(1, "an option that says nothing about comparisons", compare="")
    compared = {n for n, d in DECLARED.items() if d.spec.compare != IGNORED}
    assert compared <= set(KEYS)
    assert {n for n, d in DECLARED.items() if d.spec.compare == BLOCKS} <= set(BLOCKING)


@pytest.mark.parametrize(
    # model and protocol are read from what the run resolved (run.json's top level)
    "key",
    sorted(
        n
        for n, d in DECLARED.items()
        if d.spec.compare == BLOCKS and n not in ("model", "protocol")
    ),
)
def test_each_blocking_option_blocks_when_it_differs(key: str) -> None:
    # the 18 load and workload options the old, hand-kept list missed among them
    default = DECLARED[key].default
    other = {"modes": ["sync"], "extra_body": {"top_k": 5}, "rate": 4.0}.get(
        key, 7 if not isinstance(default, str) else "other"
    )
    got = diffs(run_json(), run_json(config={key: other}))
    assert key in got and got[key].blocking, got
    assert diffs(run_json(), run_json(protocol="openai-completions"))["protocol"].blocking


def test_an_older_run_without_an_option_compares_as_its_default() -> None:
    # a run.json from before --prefix-len existed: that build sent no prefix groups
    old, new = run_json(), run_json(config={"prefix_len": None, "first_start": "spread"})
    assert diffs(old, new) == {}
    changed = diffs(old, run_json(config={"first_start": "together"}))
    assert changed["first_start"].blocking
    assert changed["first_start"].text == "--first-start: baseline spread, run together"


def test_ignored_options_are_not_compared() -> None:
    got = diffs(run_json(), run_json(config={"out": "/elsewhere", "metrics_port": 9646}))
    assert got == {}


def test_gate_is_inconclusive_against_another_model_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], run_factory: Callable[..., Path]
) -> None:
    recs = make_records("stream", "stream", 300, t_start=T0, seed=1)
    base = write_run(tmp_path / "b", recs)
    doc = tmp_path / "base.json"
    assert main(["baseline", str(base), "--out", str(doc)]) == 0
    assert json.loads(doc.read_text())["fingerprint"]["model"] == "synthetic"
    other = write_run(
        tmp_path / "r",
        make_records("stream", "stream", 300, t_start=T0, seed=2),
        meta={"model": "bigger-model"},
    )
    gate = ["gate", str(other), "--baseline", str(doc)]
    assert main(gate) == 2
    out = capsys.readouterr().out
    assert "not comparable with the baseline — target model: baseline synthetic, run bigger" in out
    assert "--allow-difference model" in out
    assert main([*gate, "--allow-difference", "model"]) == 0
    assert "noted: target model: baseline synthetic" in capsys.readouterr().out
