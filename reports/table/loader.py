"""Read a run directory (``run.json`` + its records) into a ``Run``, tolerating bad lines.

The records file is ``requests.jsonl``, or ``.jsonl.gz``/``.jsonl.zst`` when the
run compressed it (``loadtests.recordfile``).  It is streamed once, line by line,
into columns (``reports.table.columns.RecordTable``): a million records take the
memory of their numbers, not of a million objects.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from llmload.loadtests import recordfile
from llmload.loadtests.redact import redact_url
from llmload.reports.table.columns import RecordTable, TableBuilder
from llmload.reports.table.scrapes import GPU_FILE, ServerRun, read_server_run
from llmload.reports.table.steady import is_auto, steady_states


class RunError(Exception):
    """The run directory cannot be read at all (missing, empty, not a run)."""


@dataclass
class Run:
    """One run: its metadata, its records (warm-up included) and what could not be read.

    ``records`` is a ``RecordTable`` when read from disk (a sequence of records,
    with columns for the statistics); a list of records works too.
    """

    path: Path
    meta: dict[str, Any]
    records: RecordTable
    corrupt_lines: list[int] = field(default_factory=list)
    #: the records file's last line, when it was cut short (the run stopped mid-write)
    cut_line: int | None = None
    _measured: RecordTable | None = field(default=None, repr=False, compare=False)
    #: the target's own metrics as scraped during the run (None: none were)
    server: ServerRun | None = None
    #: the GPU exporter's scrapes during the run (``gpu_metrics.jsonl``; None: none were)
    gpu: ServerRun | None = None
    #: ``--warmup auto``: where each phase's steady state began (wall time;
    #: ``reports.table.steady``)
    steady_starts: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.records, RecordTable):
            self.records = RecordTable.of(self.records)

    @property
    def measured(self) -> RecordTable:
        """Records that count for statistics (warm-up excluded; with ``--warmup auto``, each
        phase's transient too)."""
        if self._measured is None:
            t = self.records
            keep = ~t.warmup()
            if self.steady_starts:
                started = t.num("started_at")
                for phase, start in self.steady_starts.items():
                    keep &= ~(t.is_("phase", phase) & (started < start))
            self._measured = t.where(keep)
        return self._measured

    @property
    def name(self) -> str:
        return str(self.meta.get("run_id") or self.path.name)


def decode_line(line: bytes) -> Any:
    """One line's JSON: orjson, or ``json`` for what orjson refuses and ``json`` reads
    (NaN, integers past 64 bits, invalid UTF-8 read as replacement characters)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line.decode("utf-8", "replace"))


def load_run(path: Path | str) -> Run:
    """Load ``path``; a corrupt records line is skipped and counted, never fatal."""
    run_dir = Path(path)
    if not run_dir.exists():
        raise RunError(f"run directory {run_dir} does not exist")
    if not run_dir.is_dir():
        raise RunError(f"{run_dir} is not a directory (expected a run directory)")
    requests_path = recordfile.find(run_dir)
    if requests_path is None:
        raise RunError(f"{run_dir} has no requests.jsonl (not a run directory?)")
    meta = _load_meta(run_dir / "run.json")
    builder = TableBuilder()
    add = builder.add
    corrupt: list[int] = []
    last = 0
    for lineno, line in enumerate(recordfile.read_lines(requests_path), start=1):
        if not line.strip():
            continue
        last = lineno
        try:
            data = decode_line(line)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            add(data)
        except (ValueError, TypeError, OverflowError):
            corrupt.append(lineno)
    records = builder.table()
    # a whole line never fails to decode: a bad last one is where the writing stopped
    cut = last if corrupt and corrupt[-1] == last else None
    if not len(records):
        detail = f" ({len(corrupt)} corrupt lines)" if corrupt else ""
        raise RunError(f"{requests_path} holds no readable records{detail}: the run is empty")
    server = read_server_run(run_dir)
    starts = (
        {p: s.started_at for p, s in steady_states(meta, records).items()} if is_auto(meta) else {}
    )
    return Run(
        path=run_dir,
        meta=meta,
        records=records,
        corrupt_lines=corrupt,
        cut_line=cut,
        server=server,
        gpu=read_server_run(run_dir, GPU_FILE),
        steady_starts=starts,
    )


def _load_meta(path: Path) -> dict[str, Any]:
    """``run.json`` decoded, with the target redacted again; ``{}`` when missing or unreadable."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"_meta_error": f"{path.name} missing or unreadable"}
    if not isinstance(meta, dict):
        return {"_meta_error": f"{path.name} is not a JSON object"}
    if isinstance(meta.get("target"), str):
        meta["target"] = redact_url(meta["target"])
    return meta
