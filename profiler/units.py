"""Human-readable sizes and durations, shared by the CLI, the GUI and the report."""

from __future__ import annotations

import re

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(value: float | None) -> str:
    if value is None:
        return "—"
    size = float(value)
    for unit in _UNITS:
        if abs(size) < 1024 or unit == _UNITS[-1]:
            if unit == "B":
                return f"{int(size)} B"
            return f"{size:.2f} {unit}" if abs(size) < 100 else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


_SIZE_SUFFIXES = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1024, "kib": 1024,
    "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1024**3, "gib": 1024**3,
    "t": 1024**4, "tb": 1024**4, "tib": 1024**4,
}  # fmt: skip


def parse_bytes(text: str) -> int:
    """'512MiB', '1.5 GiB', '2g', '1048576' -> bytes (binary units; KB means KiB here too)."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", text)
    if match is None or match.group(2).lower() not in _SIZE_SUFFIXES:
        raise ValueError(f"not a size: {text!r} (examples: 512MiB, 1.5GiB, 2G)")
    value = float(match.group(1)) * _SIZE_SUFFIXES[match.group(2).lower()]
    if value < 1:
        raise ValueError(f"not a positive size: {text!r}")
    return int(value)


def format_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
