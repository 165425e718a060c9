"""The profile writer: appends frames to a profile file while a run goes on.

The file layout (a 16-byte header, then protocol frames) and its loaders live in
profiler/profile/storage.py; see docs/profile-format.md.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import BinaryIO


def _header(version: int | None = None) -> bytes:
    # Imported here, not at module level: storage re-exports ProfileWriter from this module.
    from profiler.profile import storage

    return storage.file_header(storage.BASE_VERSION if version is None else version)


class ProfileWriter:
    """Appends frames to a profile file from any thread; flush() pushes them to the OS."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._file: BinaryIO = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self._lock = threading.Lock()
        self._buffer = bytearray(_header())
        self.bytes_written = 0
        self.flush()

    def write(self, frame: bytes) -> None:
        with self._lock:
            self._buffer += frame

    def mark_attachments(self) -> None:
        """The file is about to hold ATTACHMENT frames: its header says format version 2."""
        from profiler.profile.storage import FILE_HEADER, FORMAT_VERSION

        with self._lock:
            if self._file.closed:
                return
            if len(self._buffer) >= FILE_HEADER.size and self.bytes_written == 0:
                self._buffer[: FILE_HEADER.size] = _header(FORMAT_VERSION)
            else:
                os.pwrite(self._file.fileno(), _header(FORMAT_VERSION), 0)

    def flush(self) -> None:
        with self._lock:
            if not self._buffer or self._file.closed:
                return
            data = bytes(self._buffer)
            self._buffer.clear()
            self._file.write(data)
            self._file.flush()
            self.bytes_written += len(data)

    def close(self) -> None:
        self.flush()
        with self._lock:
            if not self._file.closed:
                os.fsync(self._file.fileno())
                self._file.close()
