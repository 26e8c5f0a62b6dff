"""Rewrite one named section of BENCHMARKS.md, leaving the others alone."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import time
from pathlib import Path

from bench import calibration

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "BENCHMARKS.md"


def machine() -> str:
    """One line naming the machine the figures came from."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = _memory_bytes() / 2**30
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}; measured {when}"
    )


def _memory_bytes() -> float:
    """Total memory (psutil when installed; /proc/meminfo otherwise, e.g. a bare GPU host)."""
    try:
        import psutil

        return float(psutil.virtual_memory().total)
    except ImportError:
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024
    return 0.0


def write_section(name: str, body: str, path: Path = BENCHMARKS) -> None:
    """Replace the text between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``.

    The section is appended when missing.  ``body`` should name the command that
    produced it and the machine (``machine()``); a machine-speed calibration line
    (``bench.calibration``) is appended unless the body carries one already, so
    every section can be compared with figures from another machine.
    """
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    body = body.strip()
    if "calibration:" not in body:
        body += f"\n\n{calibration.current().line()}."
    block = f"{start}\n{body}\n{end}"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _m: block, text)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, as ``/proc/loadavg`` spells them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def load_note(load1: float) -> str:
    """Say whether other work shared the machine, from the 1-minute load average at start."""
    if load1 > 1.0:
        return (
            f"1-minute load average {load1:.1f} at start: other jobs were running "
            "(measured under load)"
        )
    return f"1-minute load average {load1:.1f} at start: the machine was otherwise idle"
