"""Byte units and durations: the one table of units, and how sizes are written and read.

Shared by the CLI, the GUI, the report and the agent's parser of out-of-memory messages, so
it ships beside the agent and keeps to what the agent may use: the standard library, and
syntax Python 3.9 runs.
"""

from __future__ import annotations

import re
from typing import Optional, Tuple

# Binary units, smallest first. Sizes are always written in these.
BINARY_UNITS: Tuple[Tuple[str, int], ...] = (
    ("B", 1),
    ("KiB", 1024),
    ("MiB", 1024**2),
    ("GiB", 1024**3),
    ("TiB", 1024**4),
)

# Every unit name memsight reads, lower-cased: what users type (`--ram-budget 6G`) and what
# PyTorch writes in its messages ("20.00 MiB", "1024 bytes"). KB, MB... mean KiB, MiB... here,
# as they do in PyTorch's own messages.
UNIT_BYTES = {
    "": 1, "b": 1, "byte": 1, "bytes": 1,
    "k": 1024, "kb": 1024, "kib": 1024,
    "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1024**3, "gib": 1024**3,
    "t": 1024**4, "tb": 1024**4, "tib": 1024**4,
}  # fmt: skip


def unit_for(value: float) -> Tuple[str, int]:
    """The largest binary unit not above |value| (bytes for anything under 1 KiB)."""
    size = abs(value)
    name, factor = BINARY_UNITS[0]
    for unit in BINARY_UNITS[1:]:
        if size < unit[1]:
            break
        name, factor = unit
    return name, factor


def bytes_of(number: str, unit: Optional[str]) -> int:
    """'20.00', 'MiB' -> 20971520; an unknown or missing unit counts as bytes."""
    return int(float(number) * UNIT_BYTES.get((unit or "").lower(), 1))


def format_bytes(value: Optional[float]) -> str:
    if value is None:
        return "—"
    unit, factor = unit_for(value)
    if factor == 1:
        return f"{int(value)} B"
    size = value / factor
    return f"{size:.2f} {unit}" if abs(size) < 100 else f"{size:.1f} {unit}"


def format_signed_bytes(delta: float) -> str:
    """A change of size: "+150.0 MiB", "-2.00 MiB"."""
    return ("+" if delta >= 0 else "-") + format_bytes(abs(delta))


def parse_bytes(text: str) -> int:
    """'512MiB', '1.5 GiB', '2g', '1048576' -> bytes (binary units; KB means KiB here too)."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", text)
    if match is None or match.group(2).lower() not in UNIT_BYTES:
        raise ValueError(f"not a size: {text!r} (examples: 512MiB, 1.5GiB, 2G)")
    value = bytes_of(match.group(1), match.group(2))
    if value < 1:
        raise ValueError(f"not a positive size: {text!r}")
    return value


def format_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
