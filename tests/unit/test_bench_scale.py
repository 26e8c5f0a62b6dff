"""``bench scale``'s section from fixed rows: no server, no measurement.

The experiments (``bench.scale.server``, ``.loadgen``, ``.runpath``, ``.bursts``,
``.distributed``) start real processes; ``bench.scale.section.render`` only turns
their rows into BENCHMARKS.md's markdown, and that is what is checked here.
"""

from __future__ import annotations

import argparse
import importlib
import math
from typing import Any

import pytest

from bench import __main__ as registry
from bench.scale import section

ARGS = argparse.Namespace(window=5.0)
IDLE, BUSY = "0.10 0.20 0.30", "99.00 8.00 7.00"


def _client(streams: int, client: str, p99: float, per_cpu_s: float) -> dict[str, Any]:
    events = streams * 20.0
    return {
        "client": client,
        "streams": streams,
        "requests": 10 * streams,
        "p50_ms": p99 / 2,
        "p99_ms": p99,
        "events_per_s": events,
        "client_cpu": events / per_cpu_s * 100,
        "per_cpu_s": per_cpu_s,
        "client_wait": 2.0,
    }


def _server(streams: int, workers: int, p99: float, wait: float) -> dict[str, Any]:
    return {
        "streams": streams,
        "workers": workers,
        "requests": 5 * streams,
        "errors": 0,
        "events_per_s": 19.0 * streams,
        "server_cpu": 95.0,
        "server_wait": wait,
        "us_per_event": 50.0,
        "p50": p99 / 3,
        "p99": p99,
        "max": 2 * p99,
    }


def results() -> dict[str, Any]:
    client = [
        _client(n, c, p99, per)
        for n in (200, 1000)
        for c, p99, per in (
            ("http1", 0.01 * n / 200, 30_000.0),
            ("http1, reads unstamped", 0.5 * n / 200, 31_000.0),
            ("httpx", 2.0 * n / 200, 12_000.0),
        )
    ]
    return {
        "server": [
            _server(200, 1, 0.9, 1.0),
            _server(1000, 1, 3.4, 12.0),
            _server(1000, 2, 1.1, 3.0),
        ],
        "client": client,
        "run": {
            "users": 1000,
            "rc": 0,
            "records": 40_000,
            "errors": 3,
            "p50": 1.5,
            "p99": 6.0,
            "steady_after": 10.0,
            "steady_n": 30_000,
            "steady_p50": 1.1,
            "steady_p99": 2.2,
            "cpu_p50": 71.0,
            "lag_p99": 4.5,
            "stderr": "",
        },
        "burst": [
            {
                "server": "reference",
                "mode": "together",
                "n": 200,
                "p50": 0.3,
                "p99": 1.2,
                "max": 1.9,
            },
            {"server": "bundled", "mode": "spread", "error": "boom"},
        ],
        "distributed": {
            "users": 400,
            "workers": 2,
            "rc": 0,
            "records": 60_000,
            "served": 60_000,
            "lost": 0,
            "lost_workers": 0,
            "master_cpu_s": 9.5,
            "us_per_record": 125.0,
            "small": {"users": 2, "records": 300, "master_cpu_s": 2.3},
            "stderr": "",
        },
    }


@pytest.fixture(autouse=True)
def _fixed_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(section, "machine", lambda: "MACHINE")
    monkeypatch.setattr(section.os, "cpu_count", lambda: 2)


def test_every_scale_module_imports_and_the_registry_finds_main() -> None:
    for name in ("server", "loadgen", "runpath", "bursts", "distributed", "section"):
        importlib.import_module(f"bench.scale.{name}")
    assert registry.BENCHES["scale"] == "bench.scale"
    assert callable(importlib.import_module(registry.BENCHES["scale"]).main)


def test_section_tables_and_verdicts() -> None:
    md = section.render(results(), ARGS, IDLE)
    lines = md.splitlines()
    assert lines[0] == "## Scale: 1,000 streams per core, bursts, workers"
    assert lines[2] == "`python -m bench scale` — MACHINE. Load average at start: 0.10 0.20 0.30."
    # 1. the bundled server: a row per (streams, processes); the goal read from 1,000 x 1
    assert (
        "| 1000 | 1 | 5000 | 0 | 19,000 | 95 % | 12 % | 50 µs | +1.13 / +3.40 / +6.80 ms |" in lines
    )
    assert (
        "Goal (1,000 streams, one process, TTFT error ≤ 2 ms p99): **not met** here (p99 "
        "+3.40 ms) — at 50 µs per event (request handling included) 1,000 streams × 20 "
        "events/s need 100 % of a core; the server process got 95 % of one and waited for a "
        "CPU 12 % of the window: the error is that wait."
    ) in lines
    # 2. the load generator: the three paths, the stamps line and http1 ÷ httpx
    assert "| 1000 | http1 | 10000 | 0.03 / 0.05 ms | 20,000 | 67 % | 2 % | 30,000 |" in lines
    assert any(line.startswith("Goal (1,000 streams on one client core") for line in lines)
    assert "**met** here (p99 0.1 ms)" in md
    assert (
        "Client − server p99, reads timed when they return → by the kernel's receive stamps: "
        "0.50 → 0.01 ms at 200, 2.50 → 0.05 ms at 1,000."
    ) in lines
    want = "http1 ÷ httpx (same streams, measured back to back): 2.50× at 200, 2.50× at 1,000."
    assert want in md
    # llmload run's own path under section 2
    assert "| 40,000 | 3 | 1.5 / 6.0 ms | 1.1 / 2.2 ms (30,000 requests) | 71 % | 4.5 ms |" in lines
    assert "Goal (≤ 5 ms p99) on this path: **not met** here (whole phase 6.0 ms" in md
    # 3. bursts: a failed row says so
    assert "| reference | together | 200 | 0.30 / 1.20 / 1.90 ms |" in lines
    assert "| bundled | spread | – | failed |" in lines
    # 4. distributed: the master's cost per record and the 10,000-stream extrapolation
    assert "**125 µs per extra record**" in md
    assert "one master core takes 8,000 records/s" in md
    assert "the master stays under one core for D ≥ 1.2 s" in md
    assert "take 6.7 worker cores at the http1 client's 30,000 events per CPU-second" in md


def test_busy_machine_and_failed_runs_are_said() -> None:
    res = results()
    res["client"][0] = {"streams": 200, "client": "http1", "error": "Traceback: boom"}
    res["run"] = {"users": 1000, "rc": 2, "records": 0, "stderr": "no target"}
    res["distributed"] = {"users": 400, "workers": 2, "rc": 1, "records": 0, "stderr": "died"}
    md = section.render(res, ARGS, BUSY)
    assert "— **the machine was busy** (other jobs on its 2 cores)" in md
    assert "| 200 | http1 | – | failed: Traceback: boom | | | | |" in md
    assert "No records (exit 2): no target" in md
    assert md.endswith("No records (exit 1): died")


def test_an_empty_sample_reads_nan_in_a_table() -> None:
    from llmload.loadtests.percentile import percentile_of

    empty: list[float] = []
    assert math.isnan(percentile_of(empty or [math.nan], 99) or 0.0)
    assert percentile_of([0.0, 0.0] or [math.nan], 50) == 0.0  # not nan: 0.0 is a value
