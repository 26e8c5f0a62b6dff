"""Scenarios: built-in prompt sets, weighted mix, datasets, seeding, multi-turn."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from llmload.loadtests.workload import (
    BUILTIN,
    DatasetError,
    builtin_items,
    load_dataset,
    load_workload,
    parse_mix,
)
from llmload.loadtests.workload.items import followups_for, guess_lang


def _is_zh(text: str) -> bool:
    return guess_lang(text) == "zh"


@pytest.mark.parametrize("name", list(BUILTIN))
def test_builtin_sets_have_20_distinct_prompts_in_both_languages(name):
    items = builtin_items(name)
    texts = [i.prompt for i in items]
    assert len(set(texts)) == len(texts) >= 20
    assert len({i.item_id for i in items}) == len(items)
    langs = Counter(_is_zh(t or "") for t in texts)
    assert langs[True] >= 5 and langs[False] >= 5
    assert all(i.lang == ("zh" if _is_zh(i.prompt or "") else "en") for i in items)


def test_short_qa_prompts_are_short():
    assert all(len(i.prompt or "") < 50 for i in builtin_items("short_qa"))
    assert "写一首关于春天的七言绝句" in {i.prompt for i in builtin_items("short_qa")}


def test_code_gen_contains_the_seed_prompt():
    assert "用Python写一个快速排序" in {i.prompt for i in builtin_items("code_gen")}


def test_long_summary_passages_are_about_800_characters_and_distinct():
    passages = []
    for item in builtin_items("long_summary"):
        instruction, _, passage = (item.prompt or "").partition("\n\n")
        assert instruction and passage
        assert 650 <= len(passage) <= 1000, (item.item_id, len(passage))
        passages.append(passage)
    assert len(set(passages)) == len(passages) >= 20


def test_default_max_tokens_per_scenario():
    assert {n: s.max_tokens for n, s in BUILTIN.items()} == {
        "short_qa": 64,
        "code_gen": 256,
        "long_summary": 128,
    }
    u = load_workload("long_summary").for_user(0)
    assert u.next().max_tokens == 128


def test_parse_mix():
    assert parse_mix("mix") == {"short_qa": 5.0, "code_gen": 3.0, "long_summary": 2.0}
    assert parse_mix("code_gen") == {"code_gen": 1.0}
    assert parse_mix("short_qa:3, code_gen:1") == {"short_qa": 3.0, "code_gen": 1.0}
    for bad in ("nope", "short_qa:x", "short_qa:0", "short_qa:-1"):
        with pytest.raises(ValueError):
            parse_mix(bad)


def test_mix_follows_its_weights():
    w = load_workload("mix", seed=3)
    counts: Counter[str] = Counter()
    for user in range(20):
        up = w.for_user(user)
        counts.update(up.next().scenario for _ in range(100))
    total = sum(counts.values())
    for name, weight in {"short_qa": 0.5, "code_gen": 0.3, "long_summary": 0.2}.items():
        assert abs(counts[name] / total - weight) < 0.05, counts


def test_single_scenario_uses_every_prompt_before_repeating():
    up = load_workload("short_qa", seed=1).for_user(4)
    n = len(builtin_items("short_qa"))
    first = [up.next().prompt_id for _ in range(n)]
    assert len(set(first)) == n
    second = [up.next().prompt_id for _ in range(n)]
    assert set(second) == set(first) and second != first


def _sequence(seed: int, user: int, n: int = 30) -> list[str]:
    up = load_workload("mix", seed=seed).for_user(user)
    return [up.next().prompt_id for _ in range(n)]


def test_seeded_same_seed_same_order_per_user():
    assert _sequence(7, 0) == _sequence(7, 0)
    assert _sequence(7, 5) == _sequence(7, 5)
    assert _sequence(7, 0) != _sequence(8, 0)
    assert _sequence(7, 0) != _sequence(7, 1)


def test_max_tokens_override_applies_to_all():
    w = load_workload("mix", max_tokens=17)
    up = w.for_user(0)
    assert {up.next().max_tokens for _ in range(40)} == {17}
    assert all(p["max_tokens"] == 17 for p in w.describe()["pools"].values())
    with pytest.raises(ValueError):
        load_workload(max_tokens=0)


def test_prompt_fields_for_both_adapters():
    p = load_workload("short_qa").for_user(0).next()
    assert p.turn == 0 and p.scenario == "short_qa" and p.prompt_id.startswith("short_qa/")
    assert p.messages == [{"role": "user", "content": p.prompt}]


def test_describe_builtin():
    d = load_workload("mix", seed=5, turns=2).describe()
    assert d["scenario"] == "mix" and d["seed"] == 5 and d["turns"] == 2
    assert d["names"] == ["code_gen", "long_summary", "short_qa"]
    assert d["pools"]["short_qa"] == {"prompts": 24, "weight": 5.0, "max_tokens": 64}
    assert d["dataset"] is None
    json.dumps(d)


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_dataset_prompts_messages_labels_and_max_tokens(tmp_path):
    path = _write(
        tmp_path,
        [
            json.dumps({"prompt": "Hello there", "max_tokens": 12}),
            "",
            json.dumps(
                {
                    "messages": [
                        {"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "讲个笑话"},
                    ],
                    "scenario": "jokes",
                    "id": "j1",
                }
            ),
        ],
    )
    items = load_dataset(path)
    assert [i.scenario for i in items] == ["dataset", "jokes"]
    assert items[0].item_id == "line-1" and items[0].max_tokens == 12
    assert items[1].item_id == "j1" and items[1].lang == "zh" and items[1].prompt is None
    w = load_workload(dataset=path, seed=2)
    assert w.names == ["dataset", "jokes"]
    up = w.for_user(0)
    prompts = {p.prompt_id: p for p in (up.next() for _ in range(2))}
    assert set(prompts) == {"dataset/line-1", "jokes/j1"}
    assert prompts["dataset/line-1"].max_tokens == 12
    assert prompts["dataset/line-1"].prompt == "Hello there"
    assert prompts["jokes/j1"].max_tokens == 256 and prompts["jokes/j1"].prompt is None
    assert prompts["jokes/j1"].messages is not None and len(prompts["jokes/j1"].messages) == 2
    d = w.describe()
    assert d["dataset"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert d["dataset"]["path"] == str(path) and d["dataset"]["prompts"] == 2
    only = load_workload("jokes", dataset=path)
    assert only.names == ["jokes"]
    with pytest.raises(ValueError, match="no lines"):
        load_workload("short_qa", dataset=path)
    up = load_workload(dataset=path, max_tokens=5).for_user(0)
    assert {up.next().max_tokens for _ in range(4)} == {5}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "Expecting"),
        ("[1]", "JSON object"),
        ("{}", "exactly one of"),
        ('{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}', "exactly one of"),
        ('{"prompt": ""}', "non-empty string"),
        ('{"prompt": "a", "max_tokens": 0}', "positive integer"),
        ('{"prompt": "a", "max_tokens": "10"}', "positive integer"),
        ('{"messages": []}', "non-empty list"),
        ('{"messages": [{"content": "x"}]}', "'role'"),
        ('{"messages": [{"role": "user", "content": 3}]}', "content must be a string"),
        ('{"messages": [{"role": "assistant", "content": "x"}]}', "role 'user'"),
        ('{"prompt": "a", "temperature": 1}', "unknown key"),
        ('{"prompt": "a", "scenario": ""}', "'scenario'"),
    ],
)
def test_bad_dataset_lines_name_the_line(tmp_path, line, message):
    path = _write(tmp_path, [json.dumps({"prompt": "fine"}), line])
    with pytest.raises(DatasetError, match=message) as info:
        load_dataset(path)
    assert f"{path}:2:" in str(info.value)


def test_empty_or_missing_dataset(tmp_path):
    with pytest.raises(DatasetError, match="no prompts"):
        load_dataset(_write(tmp_path, ["", "  "]))
    with pytest.raises(DatasetError, match="cannot read"):
        load_dataset(tmp_path / "missing.jsonl")


def test_multi_turn_conversation_grows_with_history():
    up = load_workload("code_gen", seed=0, turns=3).for_user(2)
    first = up.next()
    assert first.turn == 0 and len(first.messages or []) == 1
    up.record_reply("def quicksort(a): ...")
    second = up.next()
    assert second.turn == 1 and second.prompt is None
    assert second.prompt_id == first.prompt_id + "/t1"
    msgs = second.messages or []
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[0] == (first.messages or [])[0] and msgs[1]["content"] == "def quicksort(a): ..."
    item_lang = guess_lang(msgs[0]["content"])
    assert msgs[2]["content"] in followups_for("code_gen", item_lang)
    up.record_reply("with types")
    third = up.next()
    assert third.turn == 2 and len(third.messages or []) == 5
    up.record_reply("tests")
    fourth = up.next()  # a new conversation after `turns` prompts
    assert fourth.turn == 0 and len(fourth.messages or []) == 1


def test_a_failed_turn_ends_the_conversation():
    up = load_workload("short_qa", turns=4).for_user(0)
    assert up.next().turn == 0
    up.record_reply("answer")
    assert up.next().turn == 1
    # no reply recorded: the request failed
    nxt = up.next()
    assert nxt.turn == 0 and len(nxt.messages or []) == 1


def test_multi_turn_is_seeded_too():
    def convo(seed: int) -> list[str]:
        up = load_workload("mix", seed=seed, turns=2).for_user(1)
        out = []
        for _ in range(10):
            p = up.next()
            out.append((p.messages or [])[-1]["content"])
            up.record_reply("ok")
        return out

    assert convo(11) == convo(11) and convo(11) != convo(12)


def test_turns_must_be_positive():
    with pytest.raises(ValueError):
        load_workload(turns=0)
