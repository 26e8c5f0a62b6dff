"""The field's vocabulary (vLLM ``bench serve``, guidellm): aliases, --num-prompts, --goodput."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from llmload.loadtests.options import build_options, load_plan
from llmload.loadtests.run.cli import parser
from llmload.loadtests.run.phaseloop import plan_phases
from llmload.loadtests.run.phases import shard_share
from llmload.loadtests.run.shapes import ArrivalSchedule
from llmload.loadtests.slo import parse_slo


def _cli(*argv: str) -> dict:
    ns = vars(parser().parse_args(["run", *argv]))
    ns.pop("command")
    ns.pop("log_level", None)
    return ns


def test_request_rate_is_rate_and_max_concurrency_is_users() -> None:
    opts = build_options({}, _cli("--request-rate", "4.5", "--max-concurrency", "7"))
    assert opts.load.rate == 4.5 and opts.load.users == 7
    assert build_options({}, _cli("--rate", "2")).load.rate == 2


def test_max_concurrency_alone_means_back_to_back() -> None:
    assert build_options({}, _cli("--max-concurrency", "8")).load.pacing == 0.0
    assert build_options({}, _cli("--max-concurrency", "8", "--pacing", "2s")).load.pacing == 2.0
    assert build_options({}, _cli("--users", "8")).load.pacing == 3.0  # our default stays


def test_alias_and_name_together_are_refused() -> None:
    with pytest.raises(ValueError, match="--users or --max-concurrency"):
        build_options({}, _cli("--users", "3", "--max-concurrency", "7"))
    with pytest.raises(ValueError, match="--slo or --goodput"):
        build_options({}, _cli("--slo", "ttft=1s", "--goodput", "ttft:600"))


def test_plan_accepts_the_field_names(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(
        'request-rate = 3\nmax_concurrency = 6\nnum-prompts = 50\ngoodput = ["ttft:600", '
        '"tpot:50"]\ndataset = "random"\ninput-len = 64\noutput-len = 16\nrange-ratio = 0.25\n',
        encoding="utf-8",
    )
    opts = build_options(load_plan(plan_file), {})
    assert (opts.load.rate, opts.load.users, opts.load.num_prompts) == (3, 6, 50)
    assert parse_slo(opts.output.slo) == {"ttft": 600.0, "tpot": 50.0}
    assert (opts.workload.input_len, opts.workload.output_len, opts.workload.range_ratio) == (
        64,
        16,
        0.25,
    )
    # the command line overrides a plan's alias with our name, and vice versa
    assert build_options(load_plan(plan_file), _cli("--rate", "9")).load.rate == 9


def test_goodput_and_slo_are_one_parser() -> None:
    ours = parse_slo("ttft=600ms,tpot=50ms,e2e=5s")
    assert parse_slo("ttft:600 tpot:50 e2el:5000") == ours
    opts = build_options({}, _cli("--goodput", "ttft:600", "tpot:50", "e2el:5000"))
    assert parse_slo(opts.output.slo) == ours
    assert parse_slo("ttft:0.5s") == {"ttft": 500.0}


@pytest.mark.parametrize(
    "argv",
    [
        ("--goodput", "ttft600"),
        ("--goodput", "itl:30"),
        ("--slo", "ttft=fast"),
        ("--slo", "ttft=1s,ttft=2s"),
        ("--num-prompts", "0"),
        ("--input-len", "64"),  # needs --dataset random
        ("--dataset", "random", "--range-ratio", "1"),
        ("--dataset", "random", "--output-len", "0"),
        ("--output-len", "64"),  # built-in prompts have their own lengths
        ("--dataset", "random", "--max-tokens", "64"),
    ],
)
def test_bad_vocabulary_is_a_one_line_error(argv: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        build_options({}, _cli(*argv))


def test_num_prompts_without_duration_has_no_time_limit() -> None:
    opts = build_options({}, _cli("--num-prompts", "40", "--warmup", "5s"))
    assert math.isinf(opts.load.duration) and opts.config()["duration"] is None
    warm, *measured = plan_phases(opts.load)
    assert warm.requests is None and warm.duration == 5
    assert [p.requests for p in measured] == [40, 40]
    capped = build_options({}, _cli("--num-prompts", "40", "--duration", "30s"))
    assert capped.load.duration == 30 and plan_phases(capped.load)[0].requests == 40


@pytest.mark.parametrize("shards", [1, 2, 3, 7])
def test_shard_shares_add_up_exactly(shards: int) -> None:
    for total in (1, 5, 40, 101):
        parts = [shard_share(total, k, shards) or 0 for k in range(shards)]
        assert sum(parts) == total and max(parts) - min(parts) <= 1
    assert shard_share(None, 0, shards) is None


@pytest.mark.parametrize(("arrival", "shards"), [("poisson", 1), ("constant", 1), ("poisson", 3)])
def test_open_loop_schedule_holds_exactly_num_prompts(arrival: str, shards: int) -> None:
    claimed = []
    for shard in range(shards):
        sched = ArrivalSchedule(50.0, arrival, 7, math.inf, shard, shards, limit=37)
        while (slot := sched.claim()) is not None:
            claimed.append(slot[0])
    assert sorted(claimed) == list(range(37))
