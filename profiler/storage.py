"""Profile files: a 16-byte header followed by protocol frames. See docs/profile-format.md.

The recorder appends frames while the run goes on, so a file cut short (the recorder was
killed) still loads up to its last complete frame. Anything else that is wrong with a file is
reported as a ProfileError with a one-line message naming the file; nothing in a file is ever
executed or unpickled.
"""

from __future__ import annotations

import os
import stat
import struct
import threading
import zlib
from pathlib import Path
from typing import BinaryIO

from profiler import protocol
from profiler.model import Profile
from profiler.protocol import ProtocolError
from profiler.replay import ProfileBuilder

MAGIC = b"MEMSIGHT"
FORMAT_VERSION = 1
FILE_HEADER = struct.Struct("<8sHHI")  # magic, format version, flags, reserved
SUFFIX = ".memsight"


class ProfileError(Exception):
    """A profile file that cannot be read. str() is one line: '<file>: <problem>'."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


def file_header() -> bytes:
    return FILE_HEADER.pack(MAGIC, FORMAT_VERSION, 0, 0)


class ProfileWriter:
    """Appends frames to a profile file from any thread; flush() pushes them to the OS."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._file: BinaryIO = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self._lock = threading.Lock()
        self._buffer = bytearray(file_header())
        self.bytes_written = 0
        self.flush()

    def write(self, frame: bytes) -> None:
        with self._lock:
            self._buffer += frame

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


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Read a profile file into a Profile, or raise ProfileError."""
    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise ProfileError(path, "is a directory, not a profile file")
        if not stat.S_ISREG(mode):
            # A FIFO would block the open and a device such as /dev/zero never ends.
            raise ProfileError(path, "is a pipe or a device, not a profile file")
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ProfileError(path, "no such file") from None
    except IsADirectoryError:
        raise ProfileError(path, "is a directory, not a profile file") from None
    except OSError as exc:
        raise ProfileError(path, exc.strerror or str(exc)) from None
    profile = decode_profile(data, path)
    profile.source = path
    return profile


def decode_profile(data: bytes, name: str = "<memory>") -> Profile:
    if not data:
        raise ProfileError(name, "empty file, not a memsight profile")
    if len(data) < FILE_HEADER.size:
        if MAGIC.startswith(data[: len(MAGIC)]):
            raise ProfileError(name, f"truncated header ({len(data)} of {FILE_HEADER.size} bytes)")
        raise ProfileError(name, "not a memsight profile")
    magic, version, _flags, _reserved = FILE_HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ProfileError(name, "not a memsight profile")
    if version > FORMAT_VERSION:
        raise ProfileError(
            name,
            f"profile format version {version} is newer than this memsight reads "
            f"(up to {FORMAT_VERSION}); upgrade memsight",
        )
    if version < 1:
        raise ProfileError(name, f"invalid profile format version {version}")

    builder = ProfileBuilder()
    profile = builder.profile
    view = memoryview(data)
    pos, end, index = FILE_HEADER.size, len(data), 0
    header, header_size = protocol.HEADER, protocol.HEADER_SIZE
    feed, crc32 = builder.feed, zlib.crc32
    try:
        while pos < end:
            if end - pos < header_size:
                _cut_off(profile, pos)
                break
            length, kind, crc = header.unpack_from(data, pos)
            if kind == 0 and not data[pos:].strip(b"\0"):
                _cut_off(profile, pos)  # zeros past the last write, as a power loss leaves
                break
            if length > protocol.MAX_FILE_PAYLOAD:
                raise ProtocolError(f"frame of {length} bytes exceeds the limit")
            start = pos + header_size
            if start + length > end:
                _cut_off(profile, pos)
                break
            payload = view[start : start + length].tobytes()
            if crc32(payload) != crc:
                raise ProtocolError("checksum mismatch")
            feed(kind, payload)
            pos = start + length
            index += 1
        builder.flush()
    except ProtocolError as exc:
        raise ProfileError(name, f"corrupted at byte {pos} (frame {index}): {exc}") from None
    except (ValueError, TypeError, KeyError, OverflowError, MemoryError) as exc:
        raise ProfileError(name, f"corrupted at byte {pos} (frame {index}): {exc}") from None
    if profile.info.t0_ns is None and not profile.tables:
        raise ProfileError(name, "holds no run (no metadata and no samples)")
    if not profile.complete and not any("cut off" in w for w in profile.warnings):
        profile.warnings.append(
            "the recording did not finish normally; data ends at the last write"
        )
    return profile


def _cut_off(profile: Profile, pos: int) -> None:
    profile.warnings.append(
        f"the file ends inside a frame at byte {pos}: the recording was cut off; "
        "everything before that point is shown"
    )
