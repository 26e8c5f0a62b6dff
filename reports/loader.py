"""Read a run directory (``run.json`` + ``requests.jsonl``) into a ``Run``, tolerating bad lines."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.redact import redact_url
from llmload.reports.server.scrapes import ServerRun, read_server_run
from llmload.reports.steady import is_auto, steady_states


class RunError(Exception):
    """The run directory cannot be read at all (missing, empty, not a run)."""


@dataclass
class Run:
    """One run: its metadata, its records (warm-up included) and what could not be read."""

    path: Path
    meta: dict[str, Any]
    records: list[RequestRecord]
    corrupt_lines: list[int] = field(default_factory=list)
    #: the target's own metrics as scraped during the run (None: none were)
    server: ServerRun | None = None
    #: ``--warmup auto``: where each phase's steady state began (wall time; ``reports.steady``)
    steady_starts: dict[str, float] = field(default_factory=dict)

    @property
    def measured(self) -> list[RequestRecord]:
        """Records that count for statistics (warm-up excluded; with ``--warmup auto``, each
        phase's transient too)."""
        starts = self.steady_starts
        if not starts:
            return [r for r in self.records if not is_warmup(r)]
        return [
            r
            for r in self.records
            if not is_warmup(r) and r.started_at >= starts.get(r.phase, -math.inf)
        ]

    @property
    def name(self) -> str:
        return str(self.meta.get("run_id") or self.path.name)


def is_warmup(record: RequestRecord) -> bool:
    """Warm-up records are kept in the run but left out of every statistic."""
    return record.warmup or record.phase == "warmup"


def load_run(path: Path | str) -> Run:
    """Load ``path``; a corrupt ``requests.jsonl`` line is skipped and counted, never fatal."""
    run_dir = Path(path)
    if not run_dir.exists():
        raise RunError(f"run directory {run_dir} does not exist")
    if not run_dir.is_dir():
        raise RunError(f"{run_dir} is not a directory (expected a run directory)")
    requests_path = run_dir / "requests.jsonl"
    if not requests_path.exists():
        raise RunError(f"{run_dir} has no requests.jsonl (not a run directory?)")
    meta = _load_meta(run_dir / "run.json")
    records: list[RequestRecord] = []
    corrupt: list[int] = []
    with requests_path.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
                record = RequestRecord.from_dict(data)
                _check(record)
                records.append(record)
            except (ValueError, TypeError):
                corrupt.append(lineno)
    if not records:
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
        server=server,
        steady_starts=starts,
    )


_NUMBERS = (
    "started_at",
    "ttft_s",
    "e2e_s",
    "headers_s",
    "tpot_s",
    "ttst_s",
    "server_ttft_s",
    "server_queue_s",
    "server_e2e_s",
    "schedule_delay_s",
    "connect_s",
    "send_s",
)


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


#: every scalar field ``_check`` wants a number (or None) in
_SCALARS = attrgetter(
    *_NUMBERS, "output_tokens", "usage_output_tokens", "client_output_tokens", "turn"
)
_NUMBER_TYPES = frozenset((int, float))
_SCALAR_TYPES = frozenset((int, float, type(None)))
_LABELS = attrgetter("phase", "scenario", "mode", "status")


def _check(r: RequestRecord) -> None:
    """``ValueError`` when a decoded record has the wrong types (a corrupt line).

    A run holds up to millions of records: the exact builtin types JSON decodes to
    are checked first, in C (``set(map(type, ...))``); only a record that fails that
    goes through ``_check_each``, which names the field (or passes a subclass).
    """
    if (
        type(r.itl_s) is list
        and type(r.tokens_per_event) is list
        and type(r.started_at) in _NUMBER_TYPES
        and set(map(type, _SCALARS(r))) <= _SCALAR_TYPES
        and set(map(type, _LABELS(r))) == {str}
        and set(map(type, r.itl_s)) <= _NUMBER_TYPES
        and set(map(type, r.tokens_per_event)) <= _NUMBER_TYPES
    ):
        return
    _check_each(r)


def _check_each(r: RequestRecord) -> None:
    """``_check`` field by field: raises naming the first field of the wrong type."""
    for name in _NUMBERS:
        v = getattr(r, name)
        if v is not None and not _is_number(v):
            raise ValueError(f"{name} is not a number")
    if not _is_number(r.started_at):
        raise ValueError("started_at missing")
    if not all(isinstance(x, str) for x in (r.phase, r.scenario, r.mode, r.status)):
        raise ValueError("phase, scenario, mode and status must be strings")
    if not isinstance(r.itl_s, list) or not all(_is_number(g) for g in r.itl_s):
        raise ValueError("itl_s must be a list of numbers")
    if not isinstance(r.tokens_per_event, list) or not all(
        _is_number(n) for n in r.tokens_per_event
    ):
        raise ValueError("tokens_per_event must be a list of numbers")
    for name in ("output_tokens", "usage_output_tokens", "client_output_tokens", "turn"):
        v = getattr(r, name)
        if v is not None and not _is_number(v):
            raise ValueError(f"{name} is not a number")


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
