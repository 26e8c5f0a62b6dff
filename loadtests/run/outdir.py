"""The run directory before the first request: it can be written, and it will hold the records.

``check(out_dir)`` makes the directory and writes (and removes) a probe file in it:
a path on a read-only filesystem, one without permission, or a file where the
directory should be is a sentence and exit 2 before anything is sent, like a bad
option.  ``space_note(out_dir, opts, phases)`` estimates the records' size from the
planned load — requests the phases will send at most, times a record's bytes,
compressed or not — and says so when the free space will not hold it, with
``--records-compression`` as the way out.  The estimate is an upper bound of the
load asked for (a target slower than the pacing sends fewer); a write that fails
mid-run is the writer's (``loadtests.run.writer``): the run stops and says so.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from llmload.loadtests.options import RunOptions
from llmload.loadtests.run.phases import Phase
from llmload.loadtests.sizes import MIB

#: a record's bytes: its fields, plus one inter-token gap (~20 bytes of JSON) per token
RECORD_BYTES = 900
GAP_BYTES = 20
#: tokens per answer when the workload does not say (the scenarios' largest max_tokens)
DEFAULT_TOKENS = 256
#: what a compressed records file weighs against the plain one (measured in
#: BENCHMARKS.md, "An hour of records": gz level 1 and zstd level 3 ~1/5 to 1/6)
COMPRESSED_SHARE = {"none": 1.0, "gz": 0.25, "zst": 0.2}
#: a start-to-start interval no request beats (back to back: a fast target's answer)
MIN_INTERVAL_S = 0.05


class OutDirError(Exception):
    """The run directory cannot be made or written."""


def check(out_dir: Path) -> None:
    """Prove a file can be written in ``out_dir`` (made for the probe, then removed again
    when it was not there before); ``OutDirError`` with the reason if not."""
    probe = out_dir / ".llmload-probe"
    existed = out_dir.exists()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with probe.open("wb") as f:
            f.write(b"llmload")
            f.flush()
            os.fsync(f.fileno())
        probe.unlink()
        if not existed:
            out_dir.rmdir()  # made again by the writer: a run that never starts leaves none
    except OSError as exc:
        raise OutDirError(
            f"the run directory {out_dir} cannot be written ({exc.strerror or exc}): "
            "give --out a directory on a writable filesystem"
        ) from None


def expected_requests(opts: RunOptions, phases: Sequence[Phase]) -> int:
    """The most requests the planned phases send (an upper bound of the load asked for)."""
    load = opts.load
    total = 0.0
    for phase in phases:
        if phase.requests is not None:
            total += phase.requests
            continue
        if math.isinf(phase.duration):
            continue  # a trace replay's phase: its requests are counted above
        rate = phase.rate if phase.rate is not None else load.rate
        if rate is not None:
            total += rate * phase.duration
        else:
            users = phase.users if phase.users is not None else load.users
            total += users * phase.duration / max(load.pacing, MIN_INTERVAL_S)
    return int(total)


def expected_bytes(opts: RunOptions, phases: Sequence[Phase]) -> int:
    """The records file's size for that many requests, compressed as asked."""
    work = opts.workload
    tokens = work.max_tokens or work.output_len or DEFAULT_TOKENS
    per_record = RECORD_BYTES + GAP_BYTES * tokens
    share = COMPRESSED_SHARE[opts.output.records_compression]
    return int(expected_requests(opts, phases) * per_record * share)


def space_note(out_dir: Path, opts: RunOptions, phases: Sequence[Phase]) -> str | None:
    """A warning when the free space will not hold the records, else None."""
    need = expected_bytes(opts, phases)
    try:
        free = shutil.disk_usage(out_dir).free
    except OSError:
        return None
    if need <= free:
        return None
    way_out = (
        "; --records-compression zst writes about a fifth of that"
        if opts.output.records_compression == "none"
        else ""
    )
    return (
        f"the records may need up to {need / MIB:,.0f} MiB and {out_dir} has "
        f"{free / MIB:,.0f} MiB free{way_out}; a run whose disk fills stops there (exit 4)"
    )
