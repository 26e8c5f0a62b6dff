"""RequestRecord.to_dict: the same dict dataclasses.asdict gives, and independent of the record."""

from __future__ import annotations

import dataclasses
import json

from llmload.loadtests.measure.record import RequestRecord


def _full() -> RequestRecord:
    base = RequestRecord("r1", "stream", "chat", "stream", "/v1/chat/completions", 1.5e9, "ok")
    values = {  # every optional field set to a value of its kind
        f.name: 0.25 if "_s" in f.name else 3
        for f in dataclasses.fields(base)
        if getattr(base, f.name) is None
    }
    values.update(
        itl_s=[0.01, 0.02],
        tokens_per_event=[1, 2],
        finish_reason="length",
        stream_end="done",
        error="x",
    )
    return dataclasses.replace(base, **values)


def test_to_dict_matches_asdict_for_every_field() -> None:
    for rec in (_full(), RequestRecord("r2", "sync", "s", "sync", "/v1/x", 0.0, "timeout")):
        d = rec.to_dict()
        assert d == dataclasses.asdict(rec)
        assert list(d) == [f.name for f in dataclasses.fields(rec)]  # declaration order
        assert RequestRecord.from_dict(d) == rec
        assert RequestRecord.from_json(rec.to_json()) == rec


def test_lists_are_copies_and_unknown_keys_are_ignored() -> None:
    rec = _full()
    d = rec.to_dict()
    d["itl_s"].append(9.0)
    assert rec.itl_s == [0.01, 0.02]
    data = json.loads(rec.to_json())
    data["from_a_newer_version"] = 1
    assert RequestRecord.from_dict(data) == rec
