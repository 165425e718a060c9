"""A recording large enough for a stored overview (profiler/profile/overview.py), at a test's
size: the tests of the overview and of opening a large profile in the window share it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memsight.profiler import protocol
from memsight.profiler.profile import overview
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.recorder.blocks import TableBuffer

T0 = 5_000_000_000
ROWS = 12_000
BINS = 64


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """An overview for a profile of 10,000 rows, in 64 slices: the same code as a day-long
    run's 8.6 M rows in 4,096 slices, at a test's size."""
    monkeypatch.setattr(overview, "OVERVIEW_MIN_ROWS", 10_000)
    monkeypatch.setattr(overview, "OVERVIEW_BINS", BINS)


def write_run(
    path: Path, rows: int = ROWS, seed: int = 0, end: bool = True
) -> dict[str, np.ndarray]:
    """A recording as the recorder writes it: RAM with spikes, NVML for two devices whose rows
    interleave, spans, events; returns the rows written per table."""
    rng = np.random.default_rng(seed)
    t = T0 + np.arange(rows, dtype=np.int64) * 10_000_000 + rng.integers(0, 5_000_000, rows)
    rss = 2**30 + np.cumsum(rng.integers(-(2**20), 2**20, rows))
    spikes = rng.random(rows) < 0.01
    rss_peak = rss + np.where(spikes, rng.integers(2**20, 2**28, rows), 0)
    children = np.where(rng.random(rows) < 0.5, rng.integers(0, 2**28, rows), 0)
    ram = np.column_stack([t, rss, rss_peak, children, np.full(rows, 2**34)])
    device = np.arange(2 * rows) % 2
    used = 2**32 + rng.integers(0, 2**30, 2 * rows) * (device + 1)
    nvml = np.column_stack([np.repeat(t, 2), device, used, np.full(2 * rows, 2**36), used // 2])
    span_start = t[::2][: rows // 2]
    spans = np.column_stack(
        [span_start, span_start + 1_000_000, np.arange(len(span_start)), np.zeros(len(span_start))]
    ).astype(np.int64)
    span_schema = protocol.TableSchema(
        66, "spans", [("t", "q"), ("end", "q"), ("index", "q"), ("kind", "q")]
    )
    writer = ProfileWriter(path)
    writer.write(protocol.encode_json_frame(protocol.RUN, {"t0_ns": T0, "script": "train.py"}))
    buffers = [
        (TableBuffer(protocol.RAM_TABLE), ram),
        (TableBuffer(protocol.NVML_TABLE), nvml),
        (TableBuffer(span_schema), spans),
    ]
    for buffer, _ in buffers:
        writer.write(buffer.schema.frame())
    for buffer, matrix in buffers:
        for start in range(0, len(matrix), 500):
            for row in matrix[start : start + 500]:
                buffer.add(tuple(int(v) for v in row))
            writer.write(buffer.drain())
    events = [{"t": int(t[i]), "type": "census", "iteration": i} for i in range(0, rows, 1000)]
    events += [{"t": int(t[i]), "type": "tick"} for i in range(rows)]
    if end:
        events.append({"t": int(t[-1]) + 1, "type": "recording_end"})
    writer.write(protocol.encode_json_frame(protocol.EVENTS, events))
    writer.close()
    return {"ram": ram, "nvml": nvml, "spans": spans}
