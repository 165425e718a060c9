"""Profiles built directly from arrays, for rule tests that need exact, known shapes.

End-to-end tests (tests/test_examples.py) cover real recordings; these cover the edges of each
rule: the pattern, and the look-alikes it must stay silent on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from profiler import protocol
from profiler.model import DeviceInfo, Event, Profile, RunInfo, SampleTable

MiB = 1024**2
GiB = 1024**3
SCHEMAS = {
    s.name: s
    for s in (
        protocol.RAM_TABLE,
        protocol.CHILD_TABLE,
        protocol.NVML_TABLE,
        *protocol.AGENT_TABLES,
    )
}


def table(name: str, t: Sequence[float] | np.ndarray, **columns: object) -> SampleTable:
    """A table of the named schema; columns not given are -1 (agent tables) or 0."""
    schema = SCHEMAS[name]
    rows = len(t)
    names = [c for c, _ in schema.columns]
    unknown = set(columns) - set(names)
    assert not unknown, f"no such columns in {name}: {unknown}"
    default = -1 if schema.id >= protocol.AGENT_TABLE_BASE else 0
    block = {}
    for column in names:
        if column == "t":
            block[column] = np.asarray(t, dtype=np.float64)
            continue
        value = columns.get(column, default)
        dtype = np.float64 if column == "end" else np.int64
        block[column] = np.broadcast_to(np.asarray(value, dtype=dtype), (rows,)).copy()
    out = SampleTable(name, names)
    out.append(block)
    return out


def profile(
    *tables: SampleTable,
    events: Sequence[Event] = (),
    ram_total: int = 16 * GiB,
    devices: Sequence[tuple[int, int]] = (),
    **info: object,
) -> Profile:
    run = RunInfo(script="train.py", ram_total_bytes=ram_total, **info)  # type: ignore[arg-type]
    run.devices = [DeviceInfo(i, f"GPU {i}", total) for i, total in devices]
    p = Profile(info=run, events=list(events), tables={tb.name: tb for tb in tables})
    p.complete = True
    return p


def steps(
    levels: Sequence[float] | np.ndarray, start: float = 1.0, dt: float = 0.1, **columns: object
) -> SampleTable:
    """One optimizer step every dt seconds, with memory `levels` at each (as rss unless given)."""
    n = len(levels)
    t = start + dt * np.arange(n)
    columns.setdefault("rss", np.asarray(levels))
    columns.setdefault("cleared", protocol.CLEARED_ZERO_GRAD)
    return table("steps", t, end=t + dt / 10, index=np.arange(1, n + 1), **columns)


def ram(seconds: float, rss: object, interval: float = 0.01, **columns: object) -> SampleTable:
    t = np.arange(0, seconds, interval)
    values = rss(t) if callable(rss) else rss
    columns.setdefault("rss_peak", values)
    columns.setdefault("available", 8 * GiB)
    return table("ram", t, rss=values, **columns)
