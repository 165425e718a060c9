"""Byte units and durations: the one table of units, and how sizes are written and read.

Shared by the CLI, the GUI, the report and the agent's parser of out-of-memory messages, so
it ships beside the agent and keeps to what the agent may use: the standard library, and
syntax Python 3.9 runs.
"""

from __future__ import annotations

import re
from decimal import Decimal
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


# A size as typed: ASCII digits and spaces only (re.ASCII: no superscript or full-width digit).
_SIZE = re.compile(r"[ \t]*([0-9]+(?:\.[0-9]*)?)[ \t]*([A-Za-z]*)[ \t]*", re.ASCII)


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


def exact_bytes(text: str) -> Optional[Decimal]:
    """The bytes a typed size stands for ('1.5 KiB' -> 1536; a 400-digit size a Decimal of
    that size, never a float's infinity, exact to 28 significant digits); None when `text` is
    not a size. ASCII digits only."""
    match = _SIZE.fullmatch(text)
    if match is None or match.group(2).lower() not in UNIT_BYTES:
        return None
    return Decimal(match.group(1)) * UNIT_BYTES[match.group(2).lower()]


def parse_bytes(text: str) -> int:
    """'512MiB', '1.5 GiB', '2g', '1048576' -> bytes (binary units; KB means KiB here too).
    ValueError for anything else, and for sizes under 1 byte or beyond int64."""
    exact = exact_bytes(text)
    if exact is None:
        raise ValueError(f"not a size: {text!r} (examples: 512MiB, 1.5GiB, 2G)")
    if exact >= 2**63:
        raise ValueError(f"too large a size: {text!r}")
    if exact < 1:
        raise ValueError(f"not a positive size: {text!r}")
    return int(exact)


def format_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
