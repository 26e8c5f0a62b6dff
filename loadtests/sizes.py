"""The one byte-size parser (``"64MiB"``, ``"1MB"``, ``"512KiB"`` or bytes) and its printer."""

from __future__ import annotations

import re

KIB = 1024
MIB = 1024 * KIB
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "kib": KIB,
    "k": KIB,
    "mb": 1000**2,
    "mib": MIB,
    "m": MIB,
    "gb": 1000**3,
    "gib": 1024 * MIB,
    "g": 1024 * MIB,
}


def parse_size(value: str | int | float) -> int:
    """``"64MiB"``, ``"1MB"``, ``"512KiB"``, ``"2G"`` (binary) or a number of bytes."""
    if isinstance(value, int | float):
        if value < 0 or value != int(value):
            raise ValueError(f"bad size {value!r} (a whole number of bytes)")
        return int(value)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", value)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        raise ValueError(f"bad size {value!r} (use e.g. 1MiB, 64MiB, 512KiB or bytes)")
    return int(float(m.group(1)) * _UNITS[unit])


def format_size(n: int) -> str:
    """``1048576`` -> ``"1 MiB"``; what a message or a docs table shows."""
    for unit, size in (("GiB", 1024 * MIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= size and n % (size // 1024 or 1) == 0:
            return f"{n / size:g} {unit}"
    return f"{n} bytes"
