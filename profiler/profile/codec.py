"""Encoders and decoders of sample blocks (numpy; the recorder and readers, never the agent).

Three encodings carry the same thing, a matrix of int64 rows (t first):

- ROWS: rows packed with the table's struct format. The agent sends these.
- ROWS_DELTA: the recorder's small live blocks: u32 row count, then int64 rows, the first
  absolute and each later one as its difference from the row before. Each block stands
  alone, so a file cut short loses nothing before the cut.
- COLUMNS_PACKED: the compacted form of a finished recording: u32 row count, then each
  column as its first value and successive differences, zigzag-mapped (small negatives
  become small positives) and split into 8 byte planes, so the zlib pass that follows sees
  long runs of zero bytes. About half the size of ROWS_DELTA, and a large block decodes in
  a few vectorised steps.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from memsight.profiler import protocol
from memsight.profiler.protocol import ProtocolError, TableSchema

# Packed blocks decode in threads when the table is at least this large (a day-long run's;
# below it the threads cost more than they save).
PARALLEL_DECODE_BYTES = 32 * 1024 * 1024
MAX_DECODE_THREADS = 4
# Values decoded per step of a large packed block: 512 KiB arrays, which stay in the cache
# between the decoder's passes (64K to 128K measured fastest on a 2-core EPYC VM).
DECODE_CHUNK_VALUES = 1 << 16

COUNT_SIZE = 4  # the u32 row count that opens ROWS_DELTA and COLUMNS_PACKED blocks


def _head(schema: TableSchema, encoding: int, rows: int) -> bytes:
    return bytes([schema.id, encoding]) + rows.to_bytes(COUNT_SIZE, "little")


def _deltas(matrix: np.ndarray, axis: int) -> np.ndarray:
    out = np.empty_like(matrix)
    if axis == 0:
        out[:1] = matrix[:1]
        np.subtract(matrix[1:], matrix[:-1], out=out[1:])
    else:
        out[:, :1] = matrix[:, :1]
        np.subtract(matrix[:, 1:], matrix[:, :-1], out=out[:, 1:])
    return out


def encode_row_delta(schema: TableSchema, matrix: np.ndarray) -> bytes:
    """SAMPLES payload (ROWS_DELTA) for an int64 matrix of shape (rows, columns)."""
    rows = np.ascontiguousarray(matrix, dtype="<i8")
    with np.errstate(over="ignore"):
        deltas = _deltas(rows, axis=0)
    return _head(schema, protocol.ROWS_DELTA, len(rows)) + deltas.tobytes()


def encode_columns_packed(schema: TableSchema, matrix: np.ndarray) -> bytes:
    """SAMPLES payload (COLUMNS_PACKED) for an int64 matrix of shape (rows, columns)."""
    columns = np.ascontiguousarray(np.asarray(matrix, dtype="<i8").T)
    with np.errstate(over="ignore"):
        deltas = _deltas(columns, axis=1)
        zigzag = (deltas << 1) ^ (deltas >> 63)
    planes = zigzag.view(np.uint8).reshape(-1, 8).T
    return _head(schema, protocol.COLUMNS_PACKED, int(matrix.shape[0])) + bytes(planes.tobytes())


def check_block(schema: TableSchema, encoding: int, data: bytes | memoryview) -> None:
    """Raise ProtocolError unless `data` is a well-formed block of `schema`'s table."""
    if encoding == protocol.ROWS:
        if len(data) % schema.row.size:
            raise ProtocolError(f"sample block for {schema.name} has a partial row")
        return
    if encoding not in (protocol.ROWS_DELTA, protocol.COLUMNS_PACKED):
        raise ProtocolError(f"unknown sample encoding {encoding}")
    if len(data) < COUNT_SIZE:
        raise ProtocolError("sample block is too short")
    rows = int.from_bytes(data[:COUNT_SIZE], "little")
    if len(data) - COUNT_SIZE != rows * 8 * len(schema.columns):
        raise ProtocolError(f"sample block for {schema.name} has the wrong size")


# Not a wire encoding: a queued block that is already being decoded (decode_packed in a
# thread); its data is a callable that returns the (columns, rows) matrix.
DECODED = -1

# A queued block: (encoding, its data), or (DECODED, what returns its decoded matrix).
Queued = tuple[int, "bytes | memoryview | Callable[[], np.ndarray]"]


def block_rows(schema: TableSchema, encoding: int, block: bytes | memoryview) -> int:
    """The rows in a checked block (check_block), without decoding it."""
    if encoding == protocol.ROWS:
        return len(block) // schema.row.size
    return packed_rows(block)


def packed_rows(block: bytes | memoryview) -> int:
    """The row count of a checked COLUMNS_PACKED (or ROWS_DELTA) block."""
    return int.from_bytes(block[:COUNT_SIZE], "little")


def decode_packed_into(block: bytes | memoryview, out: np.ndarray) -> np.ndarray:
    """One checked COLUMNS_PACKED block into `out`, its (columns, rows) place; returns `out`."""
    _decode_columns_packed(block, out)
    return out


def decode_packed(ncols: int, block: bytes | memoryview) -> np.ndarray:
    """One checked COLUMNS_PACKED block as a (columns, rows) int64 matrix, decoded apart from
    the rest of its table: a large file's blocks decode in threads while it is still read."""
    return decode_packed_into(block, np.empty((ncols, packed_rows(block)), dtype=np.int64))


def decode_sequence(schema: TableSchema, blocks: Sequence[Queued]) -> np.ndarray:
    """Decode (encoding, data) blocks in order, batching runs of the same encoding."""
    parts = []
    run: list[Any] = []
    run_encoding: int | None = None
    for encoding, data in blocks:
        if encoding != run_encoding and run_encoding is not None:
            parts.append(decode_blocks(schema, run_encoding, run))
            run = []
        run_encoding = encoding
        run.append(data)
    if run_encoding is not None:
        parts.append(decode_blocks(schema, run_encoding, run))
    if not parts:
        return np.empty((0, len(schema.columns)), dtype=np.int64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def decode_blocks(schema: TableSchema, encoding: int, blocks: list[Any]) -> np.ndarray:
    """Decode checked blocks of one encoding into an int64 matrix (rows, columns)."""
    ncols = len(schema.columns)
    if encoding == DECODED:
        return _joined([decoded() for decoded in blocks], ncols)
    if encoding == protocol.ROWS:
        dtype = np.dtype([(name, "<" + code) for name, code in schema.columns])
        records = np.frombuffer(b"".join(blocks), dtype=dtype)
        matrix = np.empty((len(records), ncols), dtype=np.int64)
        for i, (name, _) in enumerate(schema.columns):
            matrix[:, i] = records[name]
        return matrix
    if encoding == protocol.ROWS_DELTA:
        return _decode_row_deltas(blocks, ncols)
    counts = [int.from_bytes(block[:COUNT_SIZE], "little") for block in blocks]
    # Column by column in memory (the matrix returned is its transposed view): each column
    # a contiguous array, as the tables store them, so handing them on copies no strides.
    by_column = np.empty((ncols, sum(counts)), dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(counts, dtype=np.int64)))

    def decode(i: int) -> None:
        _decode_columns_packed(blocks[i], by_column[:, starts[i] : starts[i + 1]])

    if by_column.nbytes < PARALLEL_DECODE_BYTES or len(blocks) < 2:
        for i in range(len(blocks)):
            decode(i)
    else:
        # numpy lets go of the GIL in these loops: a large profile decodes on every core.
        workers = min(len(blocks), os.cpu_count() or 1, MAX_DECODE_THREADS)
        with ThreadPoolExecutor(workers, thread_name_prefix="memsight-decode") as pool:
            for _ in pool.map(decode, range(len(blocks))):
                pass
    rows_first: np.ndarray = by_column.T
    return rows_first


def _joined(parts: list[np.ndarray], ncols: int) -> np.ndarray:
    """(columns, rows) matrices one after another as one (rows, columns) matrix, laid out
    column by column as decode_blocks lays out packed blocks."""
    by_column = np.empty((ncols, sum(part.shape[1] for part in parts)), dtype=np.int64)
    start = 0
    for part in parts:
        by_column[:, start : start + part.shape[1]] = part
        start += part.shape[1]
    rows_first: np.ndarray = by_column.T
    return rows_first


def _decode_columns_packed(block: bytes | memoryview, out: np.ndarray) -> None:
    """One COLUMNS_PACKED block into `out`, its (columns, rows) part of the table.

    A large block is decoded DECODE_CHUNK_VALUES values of a column at a time, so that every
    pass reads and writes arrays that stay in the CPU's cache; over a whole large block each
    of the five passes goes out to memory and back (twice as slow on a day-long run)."""
    ncols, rows = out.shape
    planes = np.frombuffer(block, dtype=np.uint8, offset=COUNT_SIZE).reshape(8, rows * ncols)
    with np.errstate(over="ignore"):  # the sums wrap as the encoder's differences did
        if rows * ncols <= DECODE_CHUNK_VALUES:
            values = _deltas_of(planes, 0, rows * ncols).reshape(ncols, rows)
            np.cumsum(values, axis=1, dtype=np.int64, out=out)
            return
        for column in range(ncols):
            base = column * rows
            carry = 0  # the column's value at the end of its previous chunk
            for first in range(0, rows, DECODE_CHUNK_VALUES):
                last = min(rows, first + DECODE_CHUNK_VALUES)
                target = out[column, first:last]
                np.cumsum(_deltas_of(planes, base + first, base + last), dtype=np.int64, out=target)
                if carry:
                    target += carry
                carry = int(target[-1])


def _deltas_of(planes: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Values start..stop of a packed block's byte planes: the encoded differences, int64."""
    # The planes put back together byte by byte: assigning each plane to its byte of every
    # value is about 3x faster than a copy of the transposed (8, n) view.
    interleaved = np.empty((stop - start, 8), dtype=np.uint8)
    for byte in range(8):
        interleaved[:, byte] = planes[byte, start:stop]
    zigzag = interleaved.view("<u8").reshape(-1)
    # (z >> 1) ^ -(z & 1), in place on int64 views of the same memory.
    sign = zigzag.view(np.int64) & 1
    np.negative(sign, out=sign)
    np.right_shift(zigzag, np.uint64(1), out=zigzag)
    values: np.ndarray = zigzag.view(np.int64)
    np.bitwise_xor(values, sign, out=values)
    return values


def _decode_row_deltas(blocks: list[bytes], ncols: int) -> np.ndarray:
    """Decode concatenated ROWS_DELTA blocks with one cumulative sum.

    Each block's first row is absolute. A cumulative sum over all rows adds the previous
    blocks' totals to every row; subtracting that running offset per block restores the
    values. int64 arithmetic wraps, and the wrap cancels exactly in the subtraction.
    """
    counts = np.fromiter(
        (int.from_bytes(b[:COUNT_SIZE], "little") for b in blocks),
        dtype=np.int64,
        count=len(blocks),
    )
    total = int(counts.sum())
    if total == 0:
        return np.empty((0, ncols), dtype=np.int64)
    joined = b"".join(b[COUNT_SIZE:] for b in blocks)
    deltas = np.frombuffer(joined, dtype="<i8").reshape(total, ncols)
    with np.errstate(over="ignore"):
        sums = np.cumsum(deltas, axis=0, dtype=np.int64)
        if len(blocks) == 1:
            return sums
        ends = np.cumsum(counts)
        starts = ends - counts
        nonempty = counts > 0
        offsets = np.zeros((len(blocks), ncols), dtype=np.int64)
        first = starts[nonempty]
        offsets[nonempty] = np.where((first > 0)[:, None], sums[np.maximum(first - 1, 0)], 0)
        sums -= np.repeat(offsets, counts, axis=0)
        return sums
