"""``python -m bench reliability``: every fault and bad input, tried for real, into RELIABILITY.md.

Runs the cases of ``bench.reliability_cases`` (the harness under target faults)
and ``bench.reliability_server`` (the server under bad input and overload) and
rewrites the ``reliability`` section of RELIABILITY.md with one table row per
case: how often it was tried, whether everything survived, and how many
records (or server counts) were lost.  ``make soak`` writes the ``soak`` section.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import reliability_cases
from bench.mdsection import ROOT, machine, write_section
from bench.reliability_cases import Row

RELIABILITY = ROOT / "RELIABILITY.md"
INTRO = """\
# Reliability

What llmload was put through, how many times, what survived and what was lost.
Nothing here is typed by hand: `python -m bench reliability` (or `make reliability`)
runs every case below against real processes on loopback — `python -m llmload.loadtests run`
with its report, `python -m llmload.target_server`, nginx — and rewrites the first table;
`make soak` rewrites the soak section.  Smaller versions of the same cases run in
`make test` (`tests/integration/test_reliability_*.py`, `tests/integration/test_security_*.py`).

**Records lost** is what nobody accounted for: for the harness, requests issued
(as counted by the server, nginx, or the injected faults) minus records written;
for the server, requests sent minus requests counted in `llmserve_requests_total`.
The target is 0.

<!-- bench:reliability -->
<!-- /bench:reliability -->

<!-- bench:soak -->
<!-- /bench:soak -->
"""


def ensure_file(path: Path = RELIABILITY) -> None:
    """Create RELIABILITY.md with its intro and empty sections when missing."""
    if not path.exists():
        path.write_text(INTRO, encoding="utf-8")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(rows: list[Row], where: str, command: str, seconds: float, load: float) -> str:
    """The section: a table of every case, totals, and how it was produced."""
    lines = [
        f"Produced by `{command}` in {seconds:.0f} s on {where}; load average "
        f"{load:.1f} when it started (the machine was shared"
        f"{' and busy' if load > (os.cpu_count() or 1) else ''}).",
        "",
        "| # | case | tried | requests | survived | records lost | evidence | command |",
        "|---|---|---:|---:|---|---:|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        lines.append(
            f"| {i} | {_cell(r.case)} | {r.tried} | {r.requests} | "
            f"{'yes' if r.survived else '**NO**'} | {r.lost} | {_cell(r.evidence)} | "
            f"{_cell(r.command)} |"
        )
    tried = sum(r.tried for r in rows)
    requests = sum(r.requests for r in rows)
    lost = sum(r.lost for r in rows)
    survived = sum(r.survived for r in rows)
    lines += [
        f"| | **all** | {tried} | {requests} | {survived}/{len(rows)} | **{lost}** | | |",
        "",
        "Harness error classes: `http_5xx` (500, 502, 504), `disconnect` (connection cut "
        "mid-body), `stall` (no byte for `--stall-timeout`), `protocol` (unparseable SSE), "
        "`connect` (nothing listening).  Each harness run also checked that the run "
        "completed, `summary.json` counts the same errors, and `report.html`'s "
        "errors-over-time chart draws each class; the synthetic-fault runs also compare "
        "the live exporter's final `llmload_requests_total` with the records.",
    ]
    return "\n".join(lines)


def cases(quick: bool) -> list[Callable[[], Row]]:
    """The cases, in table order (``quick``: fewer repetitions)."""
    from bench import reliability_cases as h
    from bench import reliability_server as s

    secs = 2 if quick else 4
    return [
        lambda: h.synthetic_fault("--fail-rate", "http_5xx", secs),
        lambda: h.synthetic_fault("--disconnect-rate", "disconnect", secs),
        lambda: h.synthetic_fault("--stall-rate", "stall", secs),
        lambda: h.synthetic_fault("--malformed-rate", "protocol", secs),
        lambda: h.kill_restart(1 if quick else 3),
        lambda: h.nginx_case("502"),
        lambda: h.nginx_case("504"),
        lambda: h.own_disk_fills(1 if quick else 3),
        lambda: h.unwritable_out(),
        lambda: s.random_bodies(500 if quick else 3000),
        lambda: s.oversized(2 if quick else 10),
        lambda: s.slow_readers(3 if quick else 5),
        lambda: s.mass_disconnect(100, 2 if quick else 5),
        lambda: s.overload_case(4 if quick else 10),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench reliability", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (~1 min)")
    parser.add_argument("--out", type=Path, default=RELIABILITY, help="file to rewrite")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    began = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="llmload-reliability-") as tmp:
        reliability_cases.TMP_ROOT = Path(tmp)
        for case in cases(args.quick):
            row = case()
            ok = "ok  " if row.survived else "FAIL"
            print(f"{ok} lost={row.lost} {row.case}: {row.evidence}", flush=True)
            rows.append(row)
    command = "python -m bench reliability" + (" --quick" if args.quick else "")
    ensure_file(args.out)
    body = render(rows, machine(), command, time.monotonic() - began, load)
    write_section("reliability", body, path=args.out)
    print(f"wrote {args.out}")
    return 0 if all(r.survived and r.lost == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
