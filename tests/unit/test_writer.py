"""The run writer (requests.jsonl + run.json) and the de-duplicating record hub."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.run.hub import RecordHub
from llmload.loadtests.run.sinks import NullSink


def rec(request_id: str, phase: str = "stream", status: str = "ok") -> RequestRecord:
    return RequestRecord(
        request_id=request_id,
        phase=phase,
        scenario="short_qa",
        mode="stream",
        endpoint="/v1/chat/completions",
        started_at=1.0,
        status=status,
        ttft_s=0.1 if status == "ok" else None,
    )


def test_writer_writes_lines_as_they_come_and_run_json(tmp_path: Path) -> None:
    from llmload.loadtests.run.writer import RunWriter

    writer = RunWriter(tmp_path / "r", {"run_id": "r", "config": {"seed": 1}})
    early = json.loads((tmp_path / "r" / "run.json").read_text())
    assert early["status"] == "running" and early["schema"] == 1
    writer.on_phase("sync", "sync", "start", 10.0)
    writer.on_record(rec("a", "sync"))
    # flushed as written: readable before close
    lines = (tmp_path / "r" / "requests.jsonl").read_text().splitlines()
    assert [RequestRecord.from_json(line).request_id for line in lines] == ["a"]
    writer.on_phase("sync", "sync", "end", 11.0)
    writer.on_phase("stream", "stream", "start", 12.0)
    writer.on_record(rec("b", status="timeout"))
    writer.close()
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    assert info["status"] == "completed" and info["records"] == 2
    assert info["phases"][0] == {
        "name": "sync",
        "mode": "sync",
        "started_at": 10.0,
        "ended_at": 11.0,
    }
    assert info["phases"][1]["ended_at"] >= 12.0  # closed by close()
    assert {"hostname", "cpus", "platform", "memory_gb"} <= set(info["host"])
    assert info["config"] == {"seed": 1} and info["ended_at"] >= info["started_at"]


def test_writer_keeps_an_interrupted_status(tmp_path: Path) -> None:
    from llmload.loadtests.run.writer import RunWriter

    writer = RunWriter(tmp_path, {"run_id": "x"})
    writer.set_status("interrupted")
    writer.close()
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "interrupted"


class Collect(NullSink):
    def __init__(self) -> None:
        self.ids: list[str] = []

    def on_record(self, record: RequestRecord) -> None:
        self.ids.append(record.request_id)


class Broken(NullSink):
    def on_record(self, record: RequestRecord) -> None:
        raise RuntimeError("exporter down")


def test_hub_drops_a_batch_delivered_twice() -> None:
    sink = Collect()
    hub = RecordHub([sink])
    batch = [rec("a"), rec("b"), rec("c")]
    for r in batch + batch:
        hub.on_record(r)
    assert sink.ids == ["a", "b", "c"]
    assert hub.records == 3 and hub.duplicates == 3


def test_a_failing_sink_does_not_cost_the_others_their_records() -> None:
    sink = Collect()
    hub = RecordHub([Broken(), sink])
    hub.on_record(rec("a"))
    hub.on_record(rec("b"))
    assert sink.ids == ["a", "b"]


def test_status_line_counts_the_current_phase() -> None:
    import io

    from llmload.loadtests.percentile import percentile_of as percentile
    from llmload.loadtests.run.status import StatusLine

    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0], 95) == pytest.approx(1.95)  # linear, as the reports
    out = io.StringIO()
    status = StatusLine(out, log_every=0)
    status.begin("sync", "sync", 60)
    status.on_request_start("sync", "short_qa", "/v1/chat/completions")
    status.on_record(rec("a", "sync"))
    status.begin("stream", "stream", 60)
    status.on_request_start("stream", "short_qa", "/v1/chat/completions")
    status.on_request_start("stream", "short_qa", "/v1/chat/completions")
    status.on_request_start("stream", "short_qa", "/v1/chat/completions")
    status.on_record(rec("b"))
    status.on_record(rec("c", status="stall"))
    status.on_users(7)
    status.tick()
    line = out.getvalue()
    assert line.startswith("[stream]") and "users 7/0" in line
    assert "requests 2 errors 1 in flight 1" in line and "TTFT p50 100 ms" in line
    rows = status.summary().splitlines()
    assert rows[1].split()[:4] == ["sync", "sync", "1", "0"]
    assert rows[2].split()[:4] == ["stream", "stream", "2", "1"]


def test_reservoir_stays_bounded_and_representative() -> None:
    from llmload.loadtests.percentile import percentile_of as percentile
    from llmload.loadtests.run.status import Reservoir

    sample = Reservoir(size=500, seed=1)
    for i in range(100_000):
        sample.append(i / 100_000)
    assert len(sample) == 500 and sample.seen == 100_000
    assert abs((percentile(sample, 50) or 0) - 0.5) < 0.08
    assert abs((percentile(sample, 95) or 0) - 0.95) < 0.04


def test_a_reused_directory_starts_over(tmp_path: Path) -> None:
    from llmload.loadtests.run.writer import RunWriter

    for ids in (["a", "b"], ["c"]):
        writer = RunWriter(tmp_path, {"run_id": "x"})
        for i in ids:
            writer.on_record(rec(i))
        writer.close()
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    assert [RequestRecord.from_json(line).request_id for line in lines] == ["c"]


def _stdlib_line(record: RequestRecord) -> str:
    return json.dumps(record.to_dict(), ensure_ascii=False, separators=(",", ":"))


def test_a_record_line_holds_what_json_would_write() -> None:
    # to_json goes through orjson (docs/scale.md: 25 -> 1.5 us a record): the same values,
    # the same text but for how a small float is spelled (0.00001 where json writes 1e-05)
    full = RequestRecord(
        request_id="r1",
        phase="stream",
        scenario="mix",
        mode="stream",
        endpoint="/v1/chat/completions",
        started_at=1796123103.2019587,
        status="ok",
        ttft_s=0.10767335700074909,
        e2e_s=2.05,
        itl_s=[0.048, 1e-05, 0.0501],
        tokens_per_event=[1, 2],
        output_tokens=40,
        error=None,
    )
    failed = RequestRecord(
        request_id="r2",
        phase="stream",
        scenario="mix",
        mode="stream",
        endpoint="/x",
        started_at=1.0,
        status="http_error",
        error='503: "busy" — 服务器繁忙\n\ttab',
    )
    for record in (full, failed):
        assert json.loads(record.to_json()) == json.loads(_stdlib_line(record))
        assert RequestRecord.from_dict(json.loads(record.to_json())) == record
    assert failed.to_json() == _stdlib_line(failed)


def test_a_record_orjson_refuses_still_gets_its_line() -> None:
    odd = RequestRecord(
        request_id="r3",
        phase="stream",
        scenario="mix",
        mode="stream",
        endpoint="/x",
        started_at=1.0,
        status="protocol",
        error="lone surrogate \ud800 from a bad decoder",
    )
    assert odd.to_json() == _stdlib_line(odd)
