"""Synthetic profile files for the hostile-file tests: valid ones built frame by frame, and the
compression bombs, huge lengths and damaged frames a hostile file can hold."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from memsight.profiler import protocol
from memsight.profiler.profile import codec
from memsight.profiler.profile.header import file_header

T0 = 5_000_000_000


def ram_matrix(rows: int, rss: int = 1 << 20) -> np.ndarray:
    matrix = np.zeros((rows, len(protocol.RAM_TABLE.columns)), dtype=np.int64)
    matrix[:, 0] = T0 + np.arange(rows, dtype=np.int64) * 10_000_000
    matrix[:, 1:] = rss
    return matrix


def run_frame(**extra: Any) -> bytes:
    return protocol.encode_json_frame(protocol.RUN, {"t0_ns": T0, "script": "t.py", **extra})


def samples_frame(schema: protocol.TableSchema, matrix: np.ndarray) -> bytes:
    block = codec.encode_row_delta(schema, matrix)
    return protocol.encode_frame(protocol.SAMPLES, block)


def small_profile(schema: protocol.TableSchema = protocol.RAM_TABLE, rows: int = 50) -> bytes:
    """A valid profile: run metadata and `rows` rows of the ram table under `schema`."""
    return b"".join(
        [file_header(), run_frame(), schema.frame(), samples_frame(schema, ram_matrix(rows))]
    )


def renamed_ram_schema() -> protocol.TableSchema:
    """The ram table with its `rss` column renamed: CRC-valid, but no rule expects it."""
    columns = [
        ("rsz" if name == "rss" else name, code) for name, code in protocol.RAM_TABLE.columns
    ]
    return protocol.TableSchema(protocol.RAM_TABLE.id, protocol.RAM_TABLE.name, columns)


def output_bomb_frame(plain_bytes: int) -> bytes:
    """One OUTPUT frame of `plain_bytes` of 'A' that zlib squeezes about 1000 to 1."""
    payload = protocol.output_frame(1, T0, b"A" * plain_bytes)[protocol.HEADER_SIZE :]
    packed = zlib.compress(payload, 9)
    return (
        protocol.HEADER.pack(len(packed), protocol.OUTPUT | protocol.COMPRESSED, zlib.crc32(packed))
        + packed
    )


def bomb_profile(total_plain: int, per_frame: int = 60 << 20) -> bytes:
    """A valid header and run, then output frames that inflate to `total_plain` bytes in all:
    each frame within the per-frame limit, the whole far beyond what the file's size holds."""
    frames = [file_header(), run_frame()]
    frame = output_bomb_frame(per_frame)
    frames += [frame] * max(1, total_plain // per_frame)
    return b"".join(frames)


def huge_length_frame(kind: int = protocol.EVENTS, length: int = 0xFFFFFFFF) -> bytes:
    return protocol.HEADER.pack(length, kind, 0) + b"[]"


def nested_json_frame(depth: int = 100_000) -> bytes:
    return protocol.encode_frame(protocol.EVENTS, b"[" * depth + b"]" * depth)


def job_frames(ranks: int = 2, rows: int = 20) -> bytes:
    """What a job adds to a profile (profile/processes.py): each rank's `process` event, its
    rows in procs_ram, and an event of its own."""
    from memsight.profiler.recorder.session import PROCS_RAM_TABLE

    ram = ram_matrix(rows)
    blocks = []
    for proc in range(1, ranks + 1):
        blocks.append(np.insert(ram, 1, proc, axis=1))
    events = [
        {"t": T0 + proc, "type": "process", "proc": proc, "pid": 100 + proc, "rank": proc - 1}
        for proc in range(1, ranks + 1)
    ]
    events.append({"t": T0 + 5000, "type": "exception", "proc": 1, "exc_type": "E", "message": "m"})
    return b"".join(
        [
            protocol.encode_json_frame(protocol.EVENTS, events),
            PROCS_RAM_TABLE.frame(),
            samples_frame(PROCS_RAM_TABLE, np.vstack(blocks)),
        ]
    )


# -- files whose counts make a naive reader loop (tests/hostile/test_mutations.py) ------------


def many_processes(processes: int, events: int, kind: str) -> bytes:
    """`processes` processes of a job, then `events` events of `kind`, each naming a pid."""
    announced = [
        {"t": T0 + proc, "type": "process", "proc": proc, "pid": 1000 + proc}
        for proc in range(1, processes + 1)
    ]
    named = [{"t": T0 + 10**6 + i, "type": kind, "pid": 7} for i in range(events)]
    batch = protocol.encode_json_frame(protocol.EVENTS, announced + named, compress=True)
    return small_profile(rows=200) + batch


def rows_over_processes(processes: int, rows: int) -> bytes:
    """One procs_ram block of `rows` rows spread over `processes` processes."""
    from memsight.profiler.recorder.session import PROCS_RAM_TABLE

    ram = ram_matrix(rows)
    matrix = np.insert(ram, 1, np.arange(rows) % processes + 1, axis=1)
    block = codec.encode_columns_packed(PROCS_RAM_TABLE, matrix)
    return (
        small_profile(rows=200)
        + PROCS_RAM_TABLE.frame()
        + protocol.encode_frame(protocol.SAMPLES, block, compress=True)
    )


def constant_events(events: int) -> bytes:
    """`events` identical events in one compressed frame: megabytes of JSON in a small file."""
    same = [{"t": T0, "type": "mode", "mode": "train"}] * events
    return small_profile(rows=200) + protocol.encode_json_frame(
        protocol.EVENTS, same, compress=True
    )
