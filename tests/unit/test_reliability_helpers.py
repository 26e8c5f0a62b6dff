"""The pure parts of the reliability checks: what counts as a valid error, a valid stream,
a lost record, a growing trend; and the RELIABILITY.md table (no sockets)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from bench.bad_bodies import error_problems, stream_problems
from bench.faults import as_client_classes
from bench.mdsection import write_section
from bench.reliability import INTRO, ensure_file, render
from bench.reliability_cases import Row
from bench.server_abuse import dechunk
from bench.soak import Sample, halves, slope_per_min
from bench.soak import render as render_soak

GOOD = {"error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": None}}


def test_error_problems_accepts_only_the_openai_shape() -> None:
    ok = json.dumps(GOOD).encode()
    assert error_problems(400, "application/json", ok) == []
    assert error_problems(500, "application/json", ok) == ["server error 500"]
    assert error_problems(400, "text/plain", ok) == ["content-type 'text/plain'"]
    assert "body is not JSON" in error_problems(400, "application/json", b"Bad Request")[0]
    missing = {"error": {"message": "x", "type": "t"}}
    assert (
        "not an OpenAI error object"
        in error_problems(400, "application/json", json.dumps(missing).encode())[0]
    )
    extra = {**GOOD, "detail": "x"}
    assert error_problems(400, "application/json", json.dumps(extra).encode())
    typed = {"error": {**GOOD["error"], "param": 3}}
    assert error_problems(400, "application/json", json.dumps(typed).encode()) == ["param is int"]
    tb = {"error": {**GOOD["error"], "message": "Traceback (most recent call last): ..."}}
    assert error_problems(422, "application/json", json.dumps(tb).encode()) == [
        "traceback in message"
    ]


def test_stream_problems() -> None:
    event = b'data: {"choices": []}\n\n'
    assert stream_problems(event + b"data: [DONE]\n\n") == []
    assert stream_problems(event + b'data: {"error": {"message": "x"}}\n\n') == []
    assert stream_problems(b"") == ["empty stream"]
    assert "not JSON" in stream_problems(b"data: {oops\n\ndata: [DONE]\n\n")[0]
    assert "without [DONE]" in stream_problems(event)[0]
    assert "not an SSE data line" in stream_problems(b"event: x\n\n")[0]


def test_dechunk_and_plain_bodies() -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"
    raw = head + b"\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    assert dechunk(raw) == (head, b"hello world")
    plain = b"HTTP/1.1 413 X\r\nContent-Length: 2\r\n\r\n{}"
    assert dechunk(plain)[1] == b"{}"


def test_server_statuses_map_to_harness_classes() -> None:
    server = Counter({"ok": 5, "error": 2, "cancelled": 3, "malformed": 1, "rejected": 4})
    assert as_client_classes(server) == Counter(
        {"ok": 5, "http_5xx": 2, "stall": 3, "protocol": 1, "server:rejected": 4}
    )


def test_slope() -> None:
    assert slope_per_min([(0.0, 10.0), (60.0, 12.0), (120.0, 14.0)]) == pytest.approx(2.0)
    assert slope_per_min([(0.0, 5.0), (30.0, 5.0)]) == 0.0
    assert slope_per_min([(1.0, 5.0)]) == 0.0
    assert halves([5.0, 1.0, 3.0, 10.0, 12.0]) == (3.0, 10.0)
    assert halves([4.0]) == (4.0, 4.0)


def rows() -> list[Row]:
    return [
        Row("fault a", 10, 40, True, 0, "10 = 10", "`cmd a`"),
        Row("fault | b", 3, 7, False, 2, "off by 2", "`cmd b`"),
    ]


def test_reliability_table_sums_and_flags() -> None:
    text = render(rows(), "a machine", "python -m bench reliability", 12.0, 0.5)
    lines = text.splitlines()
    assert lines[0].startswith("Produced by `python -m bench reliability` in 12 s on a machine")
    assert "| 1 | fault a | 10 | 40 | yes | 0 | 10 = 10 | `cmd a` |" in lines
    assert "| 2 | fault \\| b | 3 | 7 | **NO** | 2 | off by 2 | `cmd b` |" in lines
    assert "| | **all** | 13 | 47 | 1/2 | **2** | | |" in lines
    busy = render(rows(), "m", "c", 1.0, 99.0)
    assert "shared and busy" in busy and "busy" not in text.splitlines()[0]


def test_reliability_file_keeps_both_sections(tmp_path: Path) -> None:
    path = tmp_path / "RELIABILITY.md"
    ensure_file(path)
    assert path.read_text() == INTRO
    write_section("reliability", "TABLE", path=path)
    write_section("soak", "SOAK", path=path)
    write_section("reliability", "TABLE 2", path=path)
    text = path.read_text()
    assert "TABLE 2" in text and "SOAK" in text and "TABLE\n" not in text
    assert text.startswith("# Reliability")
    ensure_file(path)  # an existing file is left alone
    assert path.read_text() == text


def test_soak_section_reports_growth_and_lost_records() -> None:
    def srv(rss: float, tasks: float) -> dict[str, float]:
        return {"rss_mib": rss, "threads": 4, "fds": 30, "tasks": tasks, "running": 2}

    samples = [
        Sample(t, srv(100 + t / 60, 20), {"rss_mib": 70, "threads": 3, "fds": 20})
        for t in (30.0, 60.0, 90.0, 120.0)
    ]
    res = {
        "engine": "--engine transformers --batching continuous",
        "users": 20,
        "pacing": "3s",
        "duration_s": 120.0,
        "before": srv(90, 3),
        "after": {**srv(102, 3), "running": 0},
        "loaded": samples,
        "records": 50,
        "classes": Counter({"ok": 49, "timeout": 1}),
        "counted": Counter({"ok": 49, "cancelled": 1}),
        "rc": 0,
        "command": "python -m bench.soak",
    }
    text = render_soak(res, "m")
    assert text.startswith("**2 min at 20 users**")
    row = "| server | RSS MiB | 90.0 | 100.5 | 102.0 | +1.5 | 100.8 → 101.8 | +1.00 / min | 102.0 |"
    assert row in text
    assert "| load generator | open fds | — | 20 | 20 | +0.0 | 20 → 20 | +0.00 / min | — |" in text
    assert "**records lost: 0**" in text and "49 ok, 1 timeout" in text
