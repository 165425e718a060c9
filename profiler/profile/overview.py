"""A large profile's overview: a small profile of its own, stored at the front of the file, that
draws the same curves at a whole-run view's resolution (docs/profile-format.md#overview).

A day-long run's profile holds millions of samples and takes seconds to read; the overview
holds a few thousand rows per table and reads in a fraction of a second, so the app shows the
run at once and reads the rest behind it. It is made when the profile is compacted, from
decoded rows, and stored as ATTACHMENT frames with the reserved id 0 right after the RUN frame,
so a reader finds it in the first frames without scanning the file.

The overview's rows are real rows of the profile, chosen so that in each of OVERVIEW_BINS equal
slices of a table's time span every value column (and the process tree's bytes), for each
device, descendant or process on its own, keeps its lowest and its
highest row: drawn at up to OVERVIEW_BINS pixels, its curves are the full profile's. Tables of
intervals (steps, spans) are kept only when small: a subset of them would draw as gaps.
"""

from __future__ import annotations

import mmap
import os
import stat
import zlib
from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np

from memsight.profiler import protocol
from memsight.profiler.profile import codec
from memsight.profiler.profile.header import (
    BASE_VERSION,
    FILE_HEADER,
    FLAG_WHOLE,
    PROCESSES_VERSION,
    file_header,
)
from memsight.profiler.profile.model import TIME_COLUMNS, Profile
from memsight.profiler.profile.series import tree_bytes
from memsight.profiler.protocol import ProtocolError, TableSchema

# The attachment id of the overview; the recorder numbers CUDA snapshots from 1.
OVERVIEW_ID = 0
# A profile gets an overview when one of its tables has this many rows: a million compacted
# samples load and draw in well under a second (benchmarks/README.md), a day's 8.6 M in ~5 s.
OVERVIEW_MIN_ROWS = 2_000_000
# Slices of the run: more than the pixels of a whole-run view on a wide screen.
OVERVIEW_BINS = 4096


def whole_table_rows() -> int:
    """A table this small goes into the overview whole."""
    return 4 * OVERVIEW_BINS


# Columns that say whose a row is (a device, a descendant, a process of a job): each one's rows
# are sliced on their own.
KEY_COLUMNS = ("device", "pid", "proc")
# Events of a type that occurs more often than this are left out of the overview (the rare
# ones, such as the exit, errors and censuses, are what the event lane draws).
MOST_EVENTS_OF_A_TYPE = 10_000
# The overview itself may not be larger than this: what a reader inflates before the profile.
MAX_OVERVIEW_BYTES = 64 * 1024 * 1024


def kept_rows(schema: TableSchema, matrix: np.ndarray) -> np.ndarray:
    """Indices, in order, of the rows of `matrix` (int64, rows x columns, time-ordered per key)
    that keep each value column's lowest and highest row in every slice of the time span."""
    names = [name for name, _ in schema.columns]
    rows, bins = len(matrix), OVERVIEW_BINS
    if rows <= whole_table_rows():
        return np.arange(rows)
    columns = np.ascontiguousarray(matrix.T)  # one pass, then each column is contiguous
    t = columns[0]
    low = int(t.min())
    width = -(-(int(t.max()) - low + 1) // bins)  # ns per slice: the span / bins, rounded up
    slice_of = (t - low) // width
    keys = [
        key
        for name in KEY_COLUMNS
        if name in names and (key := columns[names.index(name)]).min() != key.max()
    ]
    # One key's rows after another, each in its original (time) order: a group is the rows of
    # one key in one slice.
    order: np.ndarray | None = None
    if len(keys) == 1:
        order = np.argsort(keys[0], kind="stable")
    elif keys:
        order = np.lexsort((np.arange(rows), *reversed(keys)))

    def ordered(column: np.ndarray) -> np.ndarray:
        return column if order is None else column[order]

    boundary = np.r_[True, np.diff(ordered(slice_of)) != 0]
    for key in keys:
        boundary[1:] |= np.diff(ordered(key)) != 0
    starts = np.flatnonzero(boundary)
    chosen = [starts, np.r_[starts[1:], rows] - 1]  # each group's first and last row
    values = {
        name: ordered(columns[i])
        for i, name in enumerate(names)
        if name not in TIME_COLUMNS and name not in KEY_COLUMNS
    }
    if "rss_peak" in values and "children" in values:
        values["tree"] = tree_bytes(values["rss_peak"], values["children"])
    sizes = np.diff(np.r_[starts, rows])
    positions = np.arange(rows)
    for column in values.values():
        if column[0] == column.min() == column.max():
            continue  # constant: each group's first row has its value
        for reduce in (np.minimum, np.maximum):
            extreme = np.repeat(reduce.reduceat(column, starts), sizes)
            # Each group's first row that holds its extreme (rows past the end elsewhere).
            at = np.where(column == extreme, positions, rows)
            chosen.append(np.minimum.reduceat(at, starts))
    kept = np.unique(np.concatenate(chosen))
    return kept if order is None else np.sort(order[kept])


def overview_rows(schema: TableSchema, matrix: np.ndarray) -> np.ndarray | None:
    """The rows of a table that go into the overview; None when the table is left out."""
    if "end" in (name for name, _ in schema.columns) and len(matrix) > whole_table_rows():
        return None
    kept: np.ndarray = matrix[kept_rows(schema, matrix)]
    return kept


def needs_overview(rows: Iterable[int]) -> bool:
    """Whether a profile whose tables hold `rows` rows gets an overview."""
    return max(rows, default=0) >= OVERVIEW_MIN_ROWS


def _kept_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    counts = Counter(event["type"] for event in events)
    return [event for event in events if counts[event["type"]] <= MOST_EVENTS_OF_A_TYPE]


def overview_file(
    run: bytes | None,
    tables: Iterable[tuple[TableSchema, np.ndarray]],
    events: list[dict[str, Any]],
    version: int,
) -> bytes:
    """The overview, as the bytes of a profile file: `run` (the RUN frame, as stored), each
    table's overview rows (overview_rows), and the events of the rarer types; `version` is
    the format version of the file it is stored in."""
    # It holds no attachment: only the processes of a job raise its format version.
    own_version = PROCESSES_VERSION if version >= PROCESSES_VERSION else BASE_VERSION
    frames = [file_header(own_version, flags=FLAG_WHOLE)]
    if run is not None:
        frames.append(run)
    for schema, rows in tables:
        frames.append(
            protocol.encode_json_frame(protocol.SCHEMA, {**schema.to_json(), "rows": len(rows)})
        )
        if len(rows):
            packed = codec.encode_columns_packed(schema, rows)
            frames.append(protocol.encode_frame(protocol.SAMPLES, packed, compress=True))
    kept = _kept_events(events)
    if kept:
        frames.append(protocol.encode_json_frame(protocol.EVENTS, kept, compress=True))
    return b"".join(frames)


def overview_frames(data: bytes) -> list[bytes]:
    """The ATTACHMENT frames that store an overview's bytes."""
    return [
        protocol.attachment_frame(
            OVERVIEW_ID, offset, data[offset : offset + protocol.ATTACHMENT_CHUNK]
        )
        for offset in range(0, len(data), protocol.ATTACHMENT_CHUNK)
    ]


def read_overview(path: str | os.PathLike[str]) -> Profile | None:
    """The overview stored in a profile file, or None when it has none (a small or an
    uncompacted profile) or it cannot be read: the whole profile is then read as ever, and its
    own errors are the ones to report."""
    from memsight.profiler.profile.storage import ProfileError, decode_profile

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # opening a FIFO would block; load_profile says what it is
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size < FILE_HEADER.size:
                return None
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
                data = _overview_bytes(view)
        return None if data is None else decode_profile(data, os.fspath(path))
    except (OSError, ValueError, ProtocolError, ProfileError, MemoryError):
        return None


def _overview_bytes(view: mmap.mmap) -> bytes | None:
    """The overview's bytes from the frames right after the RUN frame of a whole file."""
    magic, _, flags, _ = FILE_HEADER.unpack_from(view)
    if magic != b"MEMSIGHT" or not flags & FLAG_WHOLE:
        return None
    pos, done = FILE_HEADER.size, 0
    parts: list[bytes] = []
    header = protocol.HEADER
    while pos + header.size <= len(view):
        length, kind, crc = header.unpack_from(view, pos)
        start = pos + header.size
        if length > protocol.MAX_FILE_PAYLOAD or start + length > len(view):
            return None
        base = kind & ~protocol.COMPRESSED
        if base == protocol.RUN and not parts:
            pos = start + length
            continue
        if base != protocol.ATTACHMENT:
            break
        payload = bytes(view[start : start + length])
        if zlib.crc32(payload) != crc:
            return None
        _, plain = protocol.unpack_payload(kind, payload, MAX_OVERVIEW_BYTES)
        found, offset, chunk = protocol.split_attachment(plain)
        if found != OVERVIEW_ID or offset != done or done + len(chunk) > MAX_OVERVIEW_BYTES:
            break
        parts.append(chunk)
        done += len(chunk)
        pos = start + length
    return b"".join(parts) if parts else None
