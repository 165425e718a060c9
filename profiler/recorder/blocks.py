"""Buffer sample rows of one table and turn them into compact SAMPLES frames."""

from __future__ import annotations

import threading
from collections.abc import Iterable

import numpy as np

from memsight.profiler import protocol
from memsight.profiler.profile.codec import encode_row_delta
from memsight.profiler.protocol import TableSchema

# Blocks smaller than this are stored uncompressed: zlib's own header would outweigh the gain.
COMPRESS_FROM = 128


class TableBuffer:
    """Thread-safe row buffer for one table; drain() returns one frame (or b"")."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self._rows: list[tuple[int, ...]] = []
        self._lock = threading.Lock()
        self.total_rows = 0

    def add(self, row: tuple[int, ...]) -> None:
        with self._lock:
            self._rows.append(row)

    def extend(self, rows: Iterable[tuple[int, ...]]) -> None:
        with self._lock:
            self._rows.extend(rows)

    def drain(self) -> bytes:
        with self._lock:
            rows, self._rows = self._rows, []
        if not rows:
            return b""
        self.total_rows += len(rows)
        matrix = np.array(rows, dtype=np.int64)
        payload = encode_row_delta(self.schema, matrix)
        return protocol.encode_frame(
            protocol.SAMPLES, payload, compress=len(payload) >= COMPRESS_FROM
        )
