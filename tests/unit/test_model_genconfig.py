"""Generation settings: model defaults < --generation-config file < request fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import GenerationConfig

from llmload.target_server.engine import EngineInputError, GenerationRequest
from llmload.target_server.model import genconfig

BASE = GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, eos_token_id=[2, 0])


def _req(**kw: object) -> GenerationRequest:
    kw.setdefault("max_tokens", 16)
    return GenerationRequest("r", None, "hi", **kw)  # type: ignore[arg-type]  # a test value outside the declared type, on purpose


def test_file_fields_apply_and_request_overrides_them() -> None:
    server = {"repetition_penalty": 1.3, "top_k": 5, "stop_strings": ["\n\n"]}
    gc, pen, stops = genconfig.resolve(BASE, server, _req())
    assert (gc.repetition_penalty, gc.top_k, gc.max_new_tokens) == (1.3, 5, 16)
    assert stops == ("\n\n",) and pen == {}
    gc, _, stops = genconfig.resolve(
        BASE, server, _req(extra={"top_k": 9, "presence_penalty": 0.5}, stop=("END",))
    )
    assert gc.top_k == 9 and gc.repetition_penalty == 1.3
    assert stops == ("\n\n", "END")


def test_temperature_zero_is_greedy_and_ignore_eos_fills_min_tokens() -> None:
    gc, _, _ = genconfig.resolve(BASE, {}, _req(temperature=0.0, ignore_eos=True, max_tokens=7))
    assert gc.do_sample is False and gc.temperature is None
    assert gc.min_new_tokens == 7
    gc, _, _ = genconfig.resolve(BASE, {"do_sample": False}, _req(temperature=0.7, min_tokens=3))
    assert gc.do_sample is True and gc.temperature == 0.7 and gc.min_new_tokens == 3


def test_openai_penalties_are_split_out() -> None:
    _, pen, _ = genconfig.resolve(BASE, {"frequency_penalty": 0.2}, _req())
    assert pen == {"frequency_penalty": 0.2}


def test_file_is_checked(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"num_beams": 2, "no_repeat_ngram_size": 3}))
    assert genconfig.load_generation_file(str(good)) == {"num_beams": 2, "no_repeat_ngram_size": 3}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"num_beamz": 2}))
    with pytest.raises(ValueError, match="num_beamz"):
        genconfig.load_generation_file(str(bad))
    with pytest.raises(ValueError, match="beam search"):
        genconfig.check_continuous({"num_beams": 2})
    with pytest.raises(ValueError, match="diversity_penalty"):
        genconfig.check_continuous({"diversity_penalty": 0.5})
    genconfig.check_continuous({"repetition_penalty": 1.2, "stop_strings": ["\n\n"]})


def test_bad_request_value_is_an_input_error() -> None:
    from llmload.target_server.model.sampling import Sampler, penalty_processors

    gc, pen, _ = genconfig.resolve(BASE, {}, _req(extra={"repetition_penalty": -1.0}))
    with pytest.raises(EngineInputError):
        penalty_processors(gc, pen, 3, [2])
    gc, _, _ = genconfig.resolve(BASE, {}, _req(extra={"top_k": -4}))
    with pytest.raises(EngineInputError):
        Sampler(gc, 0)
