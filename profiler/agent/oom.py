"""Recognise out-of-memory errors and pull the numbers out of their messages.

The messages vary across PyTorch versions and devices, so parsing is keyed on short
fragments and every number is optional. Stdlib only; runs on the target's interpreter.
"""

from __future__ import annotations

import re
from typing import Dict, Optional

from ..units import bytes_of

_SIZE = r"(\d+(?:\.\d+)?)\s*(TiB|GiB|MiB|KiB|TB|GB|MB|KB|bytes|byte|B)\b"

# (field, pattern) pairs; the first match of each field wins.
_PATTERNS = [
    ("requested", r"Tried to allocate " + _SIZE),
    ("requested", r"you tried to allocate (\d+) bytes"),
    ("total", r"total capacity of " + _SIZE),
    ("total", _SIZE + r" total capacity"),
    ("free", r"of which " + _SIZE + r" is free"),
    ("free", _SIZE + r" free\b"),
    ("allocated", _SIZE + r" is allocated by PyTorch"),
    ("allocated", _SIZE + r" already allocated"),
    ("reserved_unallocated", _SIZE + r" is reserved by PyTorch but unallocated"),
    ("reserved", _SIZE + r" reserved in total by PyTorch"),
    ("process_used", r"this process has " + _SIZE + r" memory in use"),
    ("allowed", _SIZE + r" allowed;"),
]
_COMPILED = [(field, re.compile(pattern, re.IGNORECASE)) for field, pattern in _PATTERNS]

_GPU_MARKERS = (
    "CUDA out of memory",
    "XPU out of memory",
    "MPS backend out of memory",
    "HIP out of memory",
)
_CPU_MARKERS = ("DefaultCPUAllocator", "can't allocate memory", "not enough memory")


def classify(type_name: str, message: str) -> Optional[str]:
    """'gpu', 'cpu' or 'python' for an out-of-memory error, None for anything else."""
    if type_name.endswith("OutOfMemoryError") or any(m in message for m in _GPU_MARKERS):
        return "gpu"
    if type_name.endswith("MemoryError"):
        return "python"
    if any(m in message for m in _CPU_MARKERS):
        return "cpu"
    return None


def parse_numbers(message: str) -> Dict[str, int]:
    """Byte counts named in an OOM message: requested, total, free, allocated, ..."""
    found: Dict[str, int] = {}
    for field, pattern in _COMPILED:
        if field in found:
            continue
        match = pattern.search(message)
        if match is not None:
            groups = match.groups()
            found[field] = bytes_of(groups[0], groups[1] if len(groups) > 1 else None)
    device = re.search(r"\bGPU (\d+)\b", message)
    if device is not None:
        found["device"] = int(device.group(1))
    return found
