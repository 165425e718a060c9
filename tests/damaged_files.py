"""Profiles as the recorder leaves them, finished or not, for the damaged-file tests (the CLI's
in tests/profile/test_damaged.py, the app's in tests/gui/test_damaged_file.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memsight.profiler import protocol
from memsight.profiler.profile.header import FILE_HEADER
from memsight.profiler.profile.storage import compact_profile
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.recorder.blocks import TableBuffer

T0 = 5_000_000_000
ROWS = 2000  # 20 s at 10 ms


def record(path: Path, finished: bool = True) -> Path:
    """A run as the recorder writes it: 2,000 ram rows in small blocks, an exit, and (when
    `finished`) the recording's end and the compaction that follows it."""
    writer = ProfileWriter(path)
    writer.write(
        protocol.encode_json_frame(
            protocol.RUN, {"t0_ns": T0, "script": "train.py", "interval_ms": 10}
        )
    )
    writer.write(protocol.RAM_TABLE.frame())
    ram = TableBuffer(protocol.RAM_TABLE)
    rng = np.random.default_rng(7)
    for i in range(ROWS):
        rss = (1 << 30) + int(rng.integers(0, 1 << 20))
        ram.add((T0 + i * 10_000_000, rss, rss, 0, 8 << 30))
        if i % 100 == 99:
            writer.write(ram.drain())
    end = T0 + ROWS * 10_000_000
    events = [{"t": end, "type": "exit", "exit_code": 0}]
    if finished:
        events.append({"t": end + 1, "type": "recording_end"})
    writer.write(protocol.encode_json_frame(protocol.EVENTS, events))
    writer.close()
    if finished:
        compact_profile(path)
    return path


def frame_starts(data: bytes) -> list[int]:
    starts, pos = [], FILE_HEADER.size
    while pos < len(data):
        starts.append(pos)
        pos += protocol.HEADER_SIZE + protocol.HEADER.unpack_from(data, pos)[0]
    return starts
