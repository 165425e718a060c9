"""The profile writer: appends frames to a profile file while a run goes on.

The file layout (a 16-byte header, profile/header.py, then protocol frames) and its loaders
live in profiler/profile/storage.py; see docs/profile-format.md.

A write can fail (a full disk, a quota, an I/O error) while the target goes on running. The
writer then cuts the file back to the end of its last complete frame, so that it loads up to
that point, keeps the frames not yet written in memory (up to MAX_PENDING_BYTES) and tries
them again at the next flush: if space comes back, the file holds the whole run. Past that
bound it writes nothing more, and the file ends at the gap. It never raises into the
recording; it says what happened through `warn`.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from memsight.profiler.profile.header import (
    ATTACHMENTS_VERSION,
    BASE_VERSION,
    FILE_HEADER,
    FORMAT_VERSION,
    PROCESSES_VERSION,
    file_header,
)

# What the writer holds in memory while it cannot write (a few minutes of a busy run).
MAX_PENDING_BYTES = 64 << 20


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


class ProfileWriter:
    """Appends frames to a profile file from any thread; flush() pushes them to the OS.

    `warn` gets one line when writing fails, when it resumes, and when frames are dropped.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        warn: Callable[[str], None] | None = None,
        max_pending_bytes: int = MAX_PENDING_BYTES,
    ) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        # A FIFO or a character device (`--out /dev/stdout`, a pipe) is written in order, as
        # a shell redirection writes: nothing is rewritten in place, so its header says the
        # newest format version from the start (docs/profile-format.md).
        self._stream = not stat.S_ISREG(os.fstat(self._fd).st_mode)
        self._closed = False
        self._lock = threading.Lock()
        self._warn = warn or (lambda _line: None)
        self._max_pending = max_pending_bytes
        self._buffer = bytearray(file_header(BASE_VERSION))
        self._header_version: int | None = None  # a header rewrite still to do
        self._version = 1  # the format version the header says
        if self._stream:
            self._buffer = bytearray(file_header(FORMAT_VERSION))
            self._version = FORMAT_VERSION
        self.bytes_written = 0  # the end of the last complete frame in the file
        self.failing = False  # the last write failed
        self.dropped = False  # frames were given up: the file ends at the gap
        self.flush()

    def write(self, frame: bytes) -> None:
        with self._lock:
            if self.dropped:
                return
            if len(self._buffer) + len(frame) > self._max_pending and self.failing:
                # Frames after a gap could name tables the gap held: nothing more is written.
                self.dropped = True
                self._buffer.clear()
                self._warn(
                    f"{self.path}: gave up writing after {self._max_pending >> 20} MiB "
                    "waiting for space; the profile ends where writing failed"
                )
                return
            self._buffer += frame

    def mark_attachments(self) -> None:
        """The file is about to hold ATTACHMENT frames: its header says format version 2."""
        self.mark_version(ATTACHMENTS_VERSION)

    def mark_processes(self) -> None:
        """The file is about to hold other processes than the target: format version 3."""
        self.mark_version(PROCESSES_VERSION)

    def mark_version(self, version: int) -> None:
        """The header says at least format `version` (never lower than it says already)."""
        with self._lock:
            if self._closed or version <= self._version:
                return
            self._version = version
            if len(self._buffer) >= FILE_HEADER.size and self.bytes_written == 0:
                self._buffer[: FILE_HEADER.size] = file_header(version)
            else:
                self._header_version = version
                self._write_pending()

    def flush(self) -> None:
        with self._lock:
            self._write_pending()

    def _write_pending(self) -> None:
        if self._closed or (not self._buffer and self._header_version is None):
            return
        done = 0
        try:
            if self._header_version is not None:
                os.pwrite(self._fd, file_header(self._header_version), 0)
                self._header_version = None
            with memoryview(self._buffer) as view:
                while done < len(view):
                    if self._stream:
                        done += os.write(self._fd, view[done:])
                    else:
                        done += os.pwrite(self._fd, view[done:], self.bytes_written + done)
        except OSError as exc:
            if self._stream and done:  # what a stream took is gone from here: never sent twice
                del self._buffer[:done]
                self.bytes_written += done
            with contextlib.suppress(OSError):
                # A frame cut in the middle would end the file at a checksum error.
                os.ftruncate(self._fd, self.bytes_written)
            if not self.failing:
                self.failing = True
                self._warn(
                    f"{self.path}: cannot write the profile ({_reason(exc)}); the run goes on, "
                    "recording is kept in memory and written when it can be"
                )
            return
        self.bytes_written += len(self._buffer)
        self._buffer.clear()
        if self.failing:
            self.failing = False
            self._warn(f"{self.path}: writing the profile again; nothing was lost")

    def close(self) -> None:
        with self._lock:
            self._write_pending()
            if self._closed:
                return
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            if self.failing:
                self._warn(
                    f"{self.path}: {len(self._buffer):,} bytes of the recording could not be "
                    "written; the profile ends where writing failed"
                )
            os.close(self._fd)
            self._closed = True
