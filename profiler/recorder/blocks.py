"""Buffer sample rows of one table and turn them into compact SAMPLES frames.

numpy and the codec are imported at the first drain (or earlier by warm_imports, from a
thread, while the target starts): `memsight run` starts the target without waiting for them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from memsight.profiler import protocol
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
        import numpy as np

        from memsight.profiler.profile.codec import encode_row_delta

        matrix = np.array(rows, dtype=np.int64)
        payload = encode_row_delta(self.schema, matrix)
        return protocol.encode_frame(
            protocol.SAMPLES, payload, compress=len(payload) >= COMPRESS_FROM
        )


def warm_imports() -> threading.Thread:
    """Import what draining and the profile's compaction need, in a thread: started once the
    target runs, the imports overlap its own start instead of delaying it."""

    def load() -> None:
        import memsight.profiler.profile.codec
        import memsight.profiler.profile.storage  # noqa: F401

    thread = threading.Thread(target=load, name="memsight-imports", daemon=True)
    thread.start()
    return thread
