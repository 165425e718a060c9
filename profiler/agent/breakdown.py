"""The memory breakdown of a step row: bytes of parameters, gradients and optimizer state.

Measured by steps.py for an optimizer's first steps, then at most once a second (and no more
than a small share of the time between two); measure_breakdown is also the one function of
the instrumentation that a test or a benchmark may call on an optimizer directly. Read
without running the script's code (reader.py).
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Optional, Set, Tuple

from .reader import Reader


def breakdown_row(breakdown: Dict[str, Dict[str, int]]) -> Tuple[int, ...]:
    """params, grads, state bytes, each on the CPU and on accelerators (any other device)."""
    row = []
    for kind in ("params", "grads", "state"):
        by_device = breakdown[kind]
        cpu = by_device.get("cpu", 0)
        row += [cpu, sum(by_device.values()) - cpu]
    return tuple(row)


def measure_breakdown(optimizer: Any, reader: Optional[Reader] = None) -> Dict[str, Dict[str, int]]:
    """Bytes of parameters, gradients and optimizer state, by device type.

    Storages are counted once even when several tensors share them (tied weights, flat
    parameter buffers). Read without running the script's code (see Reader): tensors of a
    class with its own __torch_dispatch__ (wrapper subclasses, whose storage is not theirs to
    tell) are left out.
    """
    if reader is None:
        reader = Reader(sys.modules["torch"])
    totals: Dict[str, Dict[str, int]] = {"params": {}, "grads": {}, "state": {}}
    seen: Set[Tuple[str, Any, int]] = set()
    storage_of, device_of = reader.storage_of, reader.device_of

    def add(kind: str, tensor: Any) -> None:
        storage = storage_of(tensor)
        device = device_of(tensor)
        key = (device.type, device.index, storage.data_ptr())
        if key in seen or storage.data_ptr() == 0:
            return
        seen.add(key)
        bucket = totals[kind]
        bucket[device.type] = bucket.get(device.type, 0) + storage.nbytes()

    plain = reader.is_plain_tensor
    with reader.no_torch_function():
        for group in reader.sequence(reader.attribute(optimizer, "param_groups", None)):
            for param in reader.sequence(reader.item(group, "params")):
                if plain(param):
                    add("params", param)
                    grad = reader.grad_of(param)
                    if grad is not None and plain(grad):
                        add("grads", grad)
        for state in reader.values(reader.attribute(optimizer, "state", None)):
            for value in reader.values(state):
                if plain(value) and reader.dim_of(value) > 0:
                    add("state", value)
    return totals
