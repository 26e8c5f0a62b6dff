"""``llmload report export``: a real run's files as Parquet and CSV, read back by DuckDB and
pyarrow, equal to ``requests.jsonl``; the server's scrapes joinable by time."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import fields
from pathlib import Path

import pytest

from llmload.loadtests.measure.record import RequestRecord
from tests.fixtures.loadtests import llmload, run_cli
from tests.fixtures.server_proc import start_server_process

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
duckdb = pytest.importorskip("duckdb")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "run"
    with start_server_process("--ttft-ms", "40", "--itl-ms", "5", "--jitter-ms", "2") as server:
        got = run_cli(
            out,
            *("--target", server.url, "--users", "4", "--duration", "3s", "--warmup", "1s"),
            *("--pacing", "0.3s"),
        )
    assert got.rc == 0, got.stderr[-2000:]
    return out


def records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "requests.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if x.strip()]


def same(a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=0, abs_tol=0)
    return a == b


def test_parquet_tables_equal_the_records_and_join_with_the_scrapes(run_dir: Path) -> None:
    got = llmload("report", "export", str(run_dir), "--out", str(run_dir / "pq"))
    assert got.returncode == 0, got.stderr
    recs = records(run_dir)
    assert f"exported {len(recs)} requests" in got.stdout
    table = pq.read_table(run_dir / "pq" / "requests.parquet")
    # every record field is a column, after the run's id: read from the record's declaration
    assert table.column_names == ["run_id", *(f.name for f in fields(RequestRecord))]
    rows = {r["request_id"]: r for r in table.to_pylist()}
    assert len(rows) == len(recs)
    for rec in recs:
        row = rows[rec["request_id"]]
        for name, value in rec.items():
            assert same(row[name], value), (name, row[name], value)
    # content events: the first at TTFT, then each ITL gap, on the run's wall clock
    con = duckdb.connect()
    pqdir = (run_dir / "pq").as_posix()
    n_events = sum(len(r["itl_s"]) + 1 for r in recs if r.get("ttft_s") is not None)
    assert con.execute(f"select count(*) from '{pqdir}/events.parquet'").fetchone()[0] == n_events
    first = con.execute(
        f"""select max(abs(e.t_s - r.ttft_s)), max(abs(e.at - r.started_at - r.ttft_s))
            from '{pqdir}/events.parquet' e join '{pqdir}/requests.parquet' r using (request_id)
            where e.event = 0"""
    ).fetchone()
    assert first[0] < 1e-9 and first[1] < 1e-6
    last = con.execute(
        f"""select max(abs(e.t_s - r.ttft_s - list_sum(r.itl_s)))
            from '{pqdir}/events.parquet' e join '{pqdir}/requests.parquet' r using (request_id)
            where e.event = len(r.itl_s)"""
    ).fetchone()[0]
    assert last < 1e-9
    # the server's running requests per second beside the client's starts (docs/export.md)
    joined = con.execute(
        f"""with q as (select floor(t) as sec, max(value) as running
                       from '{pqdir}/scrapes.parquet'
                       where family = 'llmserve_requests_running' and kind = 'value'
                       group by 1),
                 r as (select floor(started_at) as sec, count(*) as started
                       from '{pqdir}/requests.parquet' group by 1)
            select count(*), sum(started) from r join q using (sec)"""
    ).fetchone()
    assert joined[0] >= 2 and joined[1] > 0
    doc = json.loads((run_dir / "pq" / "schema.json").read_text())
    assert [c["name"] for c in doc["tables"]["requests"]["columns"]] == table.column_names
    assert doc["tables"]["events"]["key"] == ["run_id", "request_id", "event"]


def test_csv_is_the_same_data_and_an_export_twice_the_same_files(run_dir: Path) -> None:
    for out in ("csv1", "csv2"):
        got = llmload(
            "report", "export", str(run_dir), "--format", "csv", "--out", str(run_dir / out)
        )
        assert got.returncode == 0, got.stderr
    for name in ("requests.csv", "events.csv", "scrapes.csv", "schema.json"):
        assert (run_dir / "csv1" / name).read_bytes() == (run_dir / "csv2" / name).read_bytes()
    with (run_dir / "csv1" / "requests.csv").open(newline="") as fh:
        rows = {r["request_id"]: r for r in csv.DictReader(fh)}
    for rec in records(run_dir):
        row = rows[rec["request_id"]]
        for name, value in rec.items():
            text = row[name]
            if value is None:
                assert text == "", name
            elif isinstance(value, list):
                assert json.loads(text) == value, name
            elif isinstance(value, bool):
                assert text == str(value), name
            elif isinstance(value, float):
                assert float(text) == value, name  # repr: the JSON's own float
            else:
                assert text == str(value), name
    # Parquet twice: the same content
    for out in ("pq1", "pq2"):
        assert (
            llmload("report", "export", str(run_dir), "--out", str(run_dir / out)).returncode == 0
        )
    for name in ("requests", "events", "scrapes"):
        a = pq.read_table(run_dir / "pq1" / f"{name}.parquet")
        assert a.equals(pq.read_table(run_dir / "pq2" / f"{name}.parquet")), name


def test_a_corrupt_line_is_skipped_and_counted_and_a_missing_run_is_one_sentence(
    run_dir: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    lines = (run_dir / "requests.jsonl").read_text().splitlines()
    (broken / "requests.jsonl").write_text(
        "\n".join([lines[0], '{"request_id": "x", "pha', *lines[1:]]) + "\n"
    )
    got = llmload("report", "export", str(broken), "--format", "csv")
    assert got.returncode == 0, got.stderr
    assert (
        f"exported {len(lines)} requests" in got.stdout and "1 corrupt lines skipped" in got.stdout
    )
    assert not (broken / "export" / "scrapes.csv").exists()  # no scrapes in this folder
    missing = llmload("report", "export", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr
