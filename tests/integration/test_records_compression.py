"""``llmload run --records-compression``: the records compressed as written, read by the report.

A real run against the bundled synthetic server: the run directory holds
``requests.jsonl.gz`` / ``.jsonl.zst`` and no plain file, the run's own report
(built at its end) counts every record, each request the server saw is one
record, and the decoded lines are the records.
"""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import pytest
import zstandard

from tests.fixtures.loadtests import ROOT, loadtests_cmd, server_requests
from tests.integration.test_records_scale import build


@pytest.mark.parametrize("compression", ["gz", "zst"])
def test_a_compressed_run_is_reported(start_server_proc, tmp_path: Path, compression: str) -> None:
    server = start_server_proc("--ttft-ms", "20", "--itl-ms", "5")
    out = tmp_path / "run"
    proc = subprocess.run(
        loadtests_cmd(
            *("run", "--out", str(out), "--target", server.url, "--users", "4"),
            *("--pacing", "0.2s", "--duration", "2s", "--max-tokens", "8"),
            *("--records-compression", compression),
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    packed = out / f"requests.jsonl.{compression}"
    assert packed.exists() and not (out / "requests.jsonl").exists()
    data = packed.read_bytes()
    if compression == "gz":
        text = gzip.decompress(data)
    else:  # a stream of blocks (flushed as written), no content size in its header
        text = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    records = [json.loads(line) for line in text.decode().splitlines()]
    assert len(records) == server_requests(server.url) > 10
    assert all(r["status"] == "ok" for r in records)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["input"]["records"] == len(records)
    assert summary["run"]["config"]["records_compression"] == compression
    # and `llmload report build` reads it again by itself, to the same numbers
    again = build(out)
    assert again["phases"] == summary["phases"]
