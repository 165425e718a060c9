"""A job's profile file written frame by frame in the recorder's layout (recorder/session.py):
the target's own ram table, every other process' rows in procs_ram and procs_gpu, a `process`
event naming each, and their own events carrying "proc"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memsight.profiler import protocol
from memsight.profiler.profile.processes import PROC_COLUMN, shared_table_name
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.recorder.blocks import TableBuffer

T0 = 5_000_000_000
MS = 1_000_000
MiB = 1 << 20
ROWS = 100  # ten milliseconds apart: one second


def shared(schema: protocol.TableSchema, table_id: int) -> protocol.TableSchema:
    columns = [schema.columns[0], (PROC_COLUMN, "I"), *schema.columns[1:]]
    return protocol.TableSchema(table_id, shared_table_name(schema.name), columns)


PROCS_RAM = shared(protocol.RAM_TABLE, 160)
PROCS_GPU = shared(protocol.GPU_TABLE, 161)


def rank_rss(proc: int, i: int) -> int:
    """Rank 0 (process 1) grows by 1 MiB a row; rank 1 stays at 300 MiB."""
    return 300 * MiB + (i * MiB if proc == 1 else 0)


def write_job(path: Path, ranks: int = 2, events: list[dict[str, Any]] | None = None) -> None:
    """A launcher (process 0, pid 1000) and `ranks` ranks (processes 1.., pids 1001..), each
    rank with GPU memory on its own device."""
    ram = TableBuffer(protocol.RAM_TABLE)
    procs_ram = TableBuffer(PROCS_RAM)
    procs_gpu = TableBuffer(PROCS_GPU)
    for i in range(ROWS):
        t = T0 + i * 10 * MS
        ram.add((t, 50 * MiB, 50 * MiB, ranks * 300 * MiB, 8 << 30))
        for proc in range(1, ranks + 1):
            procs_ram.add((t, proc, rank_rss(proc, i), rank_rss(proc, i), 0, 8 << 30))
            allocated = (100 + 10 * proc) * MiB
            procs_gpu.add((t, proc, proc - 1, allocated, allocated, 2 * allocated, 0, 0, 0, 0, 0))
    process_events = [
        {"t": T0 + proc * MS, "type": "process", "proc": proc, "pid": 1000 + proc, "rank": proc - 1}
        for proc in range(1, ranks + 1)
    ]
    writer = ProfileWriter(path)
    writer.write(protocol.encode_json_frame(protocol.RUN, {"t0_ns": T0, "script": "job.py"}))
    writer.write(
        protocol.encode_json_frame(
            protocol.EVENTS,
            [{"t": T0, "type": "process", "proc": 0, "pid": 1000}, *process_events],
        )
    )
    for schema, buffer in (
        (protocol.RAM_TABLE, ram),
        (PROCS_RAM, procs_ram),
        (PROCS_GPU, procs_gpu),
    ):
        writer.write(schema.frame())
        writer.write(buffer.drain())
    if events:
        writer.write(protocol.encode_json_frame(protocol.EVENTS, events))
    writer.close()
