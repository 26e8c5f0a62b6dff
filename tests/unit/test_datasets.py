"""``--dataset random`` (exact token lengths) and ShareGPT JSON datasets."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from llmload.loadtests.measure.adapters import get_adapter
from llmload.loadtests.workload import load_workload
from llmload.loadtests.workload.random_dataset import RandomPrompts, default_codec, length_range
from llmload.loadtests.workload.sharegpt import MAX_ITEMS
from llmload.loadtests.workload.tokencount import Codec, load_codec
from tests.fixtures.tokenizer import merging_codec


@pytest.fixture(scope="module")
def embedded() -> Codec:
    return default_codec()


@pytest.fixture(scope="module")
def sentencepiece_style(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A differently built tokenizer (Metaspace, as Llama/Mistral), saved as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from llmload.common.embedded import corpus_text

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["<unk>"], show_progress=False)
    tok.train_from_iterator(corpus_text().splitlines(), trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.mark.parametrize("n", [1, 2, 17, 128, 512, 1500])
def test_random_prompts_have_exactly_the_asked_length(embedded: Codec, n: int) -> None:
    make = RandomPrompts(embedded, input_len=n, output_len=8)
    rng = random.Random(n)
    for _ in range(5):
        item = make(rng)
        assert len(embedded.encode(item.prompt or "")) == n
        assert item.max_tokens == item.min_tokens == 8


def test_a_tokenizer_whose_words_do_not_add_up_is_corrected(embedded: Codec) -> None:
    # one token more once the text passes 100 characters: not additive, so every text is
    # re-encoded and its tail trimmed until the count is exact
    odd = merging_codec(embedded, 100)
    make = RandomPrompts(odd, input_len=80, output_len=4)
    assert make.additive is False and RandomPrompts(embedded).additive is True
    rng = random.Random(5)
    for _ in range(5):
        assert len(odd.encode(make(rng).prompt or "")) == 80


def test_the_targets_tokenizer_is_the_one_counted(sentencepiece_style: Path) -> None:
    codec = load_codec(sentencepiece_style)
    workload = load_workload(
        dataset="random", tokenizer=str(sentencepiece_style), input_len=300, output_len=40
    )
    for user in range(4):
        prompt = workload.for_user(user).next()
        assert len(codec.encode(prompt.prompt or "")) == 300
        assert prompt.max_tokens == prompt.min_tokens == 40 and prompt.scenario == "random"
    generator = workload.describe()["pools"]["random"]["generator"]
    assert generator["tokenizer"] == str(sentencepiece_style) and generator["input_len"] == 300


def test_range_ratio_draws_within_vllms_bounds(embedded: Codec) -> None:
    assert length_range(100, 0.1) == (90, 110) and length_range(1, 0.5) == (1, 2)
    make = RandomPrompts(embedded, input_len=100, output_len=20, range_ratio=0.25)
    rng = random.Random(3)
    ins, outs = set(), set()
    for _ in range(60):
        item = make(rng)
        n_in = len(embedded.encode(item.prompt or ""))
        assert 75 <= n_in <= 125 and 15 <= (item.max_tokens or 0) <= 25
        assert item.item_id.startswith(f"{n_in}x{item.max_tokens}-")
        ins.add(n_in)
        outs.add(item.max_tokens)
    assert len(ins) > 10 and len(outs) > 5


def test_random_prompts_are_seeded_and_never_repeat() -> None:
    def prompts(seed: int) -> list[str]:
        w = load_workload(dataset="random", input_len=32, output_len=4, seed=seed)
        users = [w.for_user(u) for u in range(5)]
        return [user.next().prompt or "" for user in users for _ in range(4)]

    first = prompts(1)
    assert first == prompts(1) and first != prompts(2)
    assert len(set(first)) == len(first)  # no prefix a server could cache between requests


def test_random_dataset_refuses_max_tokens() -> None:
    with pytest.raises(ValueError, match="--output-len"):
        load_workload(dataset="random", max_tokens=10)


def test_openai_adapters_send_min_tokens() -> None:
    prompt = load_workload(dataset="random", input_len=8, output_len=5).for_user(0).next()
    for name in ("openai-chat", "openai-completions"):
        call = get_adapter(name).build(prompt, mode="stream", model="m", options={})
        assert call.json is not None
        assert call.json["max_tokens"] == call.json["min_tokens"] == 5


def _sharegpt(tmp_path: Path, convs: list) -> Path:
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(convs), encoding="utf-8")
    return path


def _conv(conv_id: str, *turns: tuple[str, str]) -> dict:
    return {"id": conv_id, "conversations": [{"from": f, "value": v} for f, v in turns]}


LONG = "the server answers every question with a long and careful reply about latency"


def test_sharegpt_first_exchange_and_reply_length(tmp_path: Path, embedded: Codec) -> None:
    convs = [
        {
            "id": "a",
            "conversations": [
                {"from": "system", "value": "Be brief."},
                {"from": "human", "value": "How fast is the first token today?"},
                {"from": "gpt", "value": LONG},
                {"from": "human", "value": "and later?"},
                {"from": "gpt", "value": "same"},
            ],
        },
        _conv("short", ("human", "hi"), ("gpt", LONG)),
        _conv("noreply", ("human", "a question with no answer")),
        {"id": "bad", "conversations": "not a list"},
        _conv("b", ("user", "请解释首字延迟是什么意思"), ("assistant", LONG)),
    ]
    workload = load_workload(dataset=_sharegpt(tmp_path, convs))
    items = {i.item_id: i for i in workload.pools[0].items}
    assert set(items) == {"a", "b"}  # too short, no reply and malformed ones are skipped
    a = items["a"]
    assert [m["role"] for m in a.first_messages()] == ["system", "user"]
    assert a.max_tokens == len(embedded.encode(LONG)) and a.min_tokens is None
    assert items["b"].lang == "zh" and workload.names == ["sharegpt"]
    forced = load_workload(dataset=_sharegpt(tmp_path, convs), output_len=9)
    assert {i.max_tokens for i in forced.pools[0].items} == {9}


def test_sharegpt_is_shuffled_by_seed_and_capped(tmp_path: Path) -> None:
    turn = [{"from": "human", "value": "tell me about streaming"}, {"from": "gpt", "value": LONG}]
    convs = [{"id": str(i), "conversations": turn} for i in range(MAX_ITEMS + 10)]
    path = _sharegpt(tmp_path, convs)
    a = [i.item_id for i in load_workload(dataset=path, seed=1).pools[0].items]
    assert len(a) == MAX_ITEMS
    assert a == [i.item_id for i in load_workload(dataset=path, seed=1).pools[0].items]
    assert a != [i.item_id for i in load_workload(dataset=path, seed=2).pools[0].items]


@pytest.mark.parametrize(
    ("content", "match"),
    [("[1, 2", "not valid ShareGPT JSON"), ("[]", "no usable conversations")],
)
def test_bad_sharegpt_files_name_the_problem(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        load_workload(dataset=path)


def test_jsonl_datasets_still_load(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "hello there", "max_tokens": 7}\n', encoding="utf-8")
    workload = load_workload(dataset=path)
    assert workload.for_user(0).next().max_tokens == 7
    with pytest.raises(ValueError, match="--output-len"):
        load_workload(dataset=path, output_len=5)


def test_embedded_tokenizer_alone_is_the_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a slim install the tokenizer is trained alone; it must split text as the model's does."""
    pytest.importorskip("transformers")
    from llmload.common import embedded as recipe
    from llmload.target_server.model import embedded

    monkeypatch.setenv("LLMLOAD_CACHE", str(tmp_path))
    alone = recipe.tokenizer_file()
    assert alone.is_relative_to(tmp_path / "tokenizers") and recipe.tokenizer_file() == alone
    text = recipe.corpus_text()[:4000] + " 首字延迟 and code: def f(x): return x"
    model_tok = embedded.build_tokenizer()
    assert load_codec(alone).encode(text) == model_tok.encode(text, add_special_tokens=False)
