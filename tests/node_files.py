"""Profiles of the nodes of a multi-node job, as `memsight run` on each node writes them, for
the tests of `memsight merge` (tests/profile/test_merge.py, tests/test_merge_refusals.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memsight.profiler import protocol
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.protocol import RAM_TABLE
from memsight.profiler.recorder.blocks import TableBuffer
from memsight.profiler.recorder.session import PROCS_RAM_TABLE

MS = 1_000_000
MiB = 1 << 20


def node(
    path: Path, host: str, start: str, t0: int, rank: int, rss: int, exit_code: int = 0
) -> Path:
    """A node's profile: its torchrun (pid 10) and one rank (pid 11, process 1), each with
    RAM rows at 0, 1 and 2 s on the node's own monotonic clock."""
    writer = ProfileWriter(path)
    run = {"t0_ns": t0, "script": "train.py", "pid": 10, "hostname": host, "start_time": start}
    writer.write(protocol.encode_json_frame(protocol.RUN, run))
    writer.mark_processes()
    ram, procs = TableBuffer(RAM_TABLE), TableBuffer(PROCS_RAM_TABLE)
    for s in range(3):
        ram.add((t0 + s * 1000 * MS, 100 * MiB, 100 * MiB, rss, 1 << 30))
        procs.add((t0 + s * 1000 * MS, 1, rss, rss, 0, 1 << 30))
    events: list[dict[str, Any]] = [
        {"t": t0, "type": "process", "proc": 0, "pid": 10},
        {"t": t0 + 100 * MS, "type": "process", "proc": 1, "pid": 11, "parent": 10, "rank": rank},
        {"t": t0 + 100 * MS, "type": "child_started", "pid": 11, "ppid": 10, "role": "other"},
        {"t": t0 + 500 * MS, "type": "exception", "proc": 1, "exc_type": "E", "message": "m"},
        {"t": t0 + 2500 * MS, "type": "child_exited", "pid": 11, "exit_code": exit_code},
        {"t": t0 + 3000 * MS, "type": "exit", "exit_code": exit_code},
        {"t": t0 + 3000 * MS, "type": "recording_end"},
    ]
    for frame in (RAM_TABLE.frame(), ram.drain(), PROCS_RAM_TABLE.frame(), procs.drain()):
        writer.write(frame)
    writer.write(protocol.encode_json_frame(protocol.EVENTS, events))
    writer.close()
    return path


def two_nodes(tmp_path: Path) -> tuple[Path, Path]:
    # The second node started 2.5 s later by the wall clock, on a monotonic clock of its own
    a = node(
        tmp_path / "a.memsight", "node-a", "2026-11-24T10:00:00.000+00:00", 5_000 * MS, 0, 300 * MiB
    )
    b = node(
        tmp_path / "b.memsight",
        "node-b",
        "2026-11-24T10:00:02.500+00:00",
        90_000 * MS,
        1,
        700 * MiB,
        1,
    )
    return a, b
