"""The target's output as memsight reads it: recorded, and copied on where it must go.

A channel is the end memsight reads: a pipe per stream for the app, or the master side of the
pseudo-terminal that stands in for the user's terminal (recorder/terminal.py). A pump thread
copies what arrives to memsight's own terminal (if any) and records it, up to `record_limit`
bytes.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import select
import stat
import threading
import time
from collections.abc import Callable

from memsight.profiler import protocol

RECORD_LIMIT = 32 * 1024 * 1024
# What one delivery gathers at most. A pseudo-terminal gives at most 4 KiB a read (its line
# discipline's buffer), so a script writing fast fills it many times over while the pump
# copies one chunk on; everything already there is read before it is copied on and recorded
# at once: one write to the terminal and one frame for up to this much, not one per 4 KiB.
BATCH_BYTES = 1024 * 1024
READ_BYTES = 65536
# What the copy to memsight's own terminal may fall behind the reading by before the reading
# waits for it (as the target would have waited for that terminal under plain python).
QUEUED_BYTES = 8 * 1024 * 1024


class StreamChannel:
    """One of the target's output streams: the fd the child writes, the fd we read.

    `crlf`: the stream is a terminal that writes "\r\n" for "\n"; the record keeps "\n".
    """

    def __init__(self, use_pty: bool = False, crlf: bool = False) -> None:
        self.is_pty = use_pty
        self.crlf = crlf
        if use_pty:
            self.read_fd, self.child_fd = os.openpty()
        else:
            self.read_fd, self.child_fd = os.pipe()

    @classmethod
    def reading(cls, read_fd: int, crlf: bool = False) -> StreamChannel:
        """A channel over an fd that exists already (a pty's master side)."""
        channel = cls.__new__(cls)
        channel.is_pty = True
        channel.crlf = crlf
        channel.read_fd, channel.child_fd = read_fd, -1
        return channel

    def child_started(self) -> None:
        """Close our copy of the child's end, so EOF arrives when the target's tree closes it."""
        if self.child_fd >= 0:
            os.close(self.child_fd)
            self.child_fd = -1


class OutputPump(threading.Thread):
    def __init__(
        self,
        channel: StreamChannel,
        stream: int,
        emit: Callable[[bytes], None],
        passthrough_fd: int | None,
        record_limit: int = RECORD_LIMIT,
        on_truncated: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(name=f"memsight-output-{stream}", daemon=True)
        self.channel = channel
        self.stream = stream
        self.emit = emit
        self.passthrough_fd = passthrough_fd
        self.record_limit = record_limit
        self.on_truncated = on_truncated
        self.recorded = 0
        self._stop_at: float | None = None
        # finish() writes here, so the pump can wait for output without a timeout.
        self._wake_read, self._wake_write = os.pipe()
        self._wake_lock = threading.Lock()
        self._copy: Copier | None = None

    def finish(self, grace_s: float) -> None:
        """Stop reading `grace_s` seconds from now, even if a grandchild still holds the pipe."""
        self._stop_at = time.monotonic() + grace_s
        with self._wake_lock:
            if self._wake_write >= 0:  # never write to a closed, possibly reused, descriptor
                with contextlib.suppress(OSError):
                    os.write(self._wake_write, b"x")

    def run(self) -> None:
        fd = self.channel.read_fd
        if self.passthrough_fd is not None:
            self._copy = Copier(self.passthrough_fd, self.stream)
            self._copy.start()
        waiting = select.poll()
        waiting.register(fd, select.POLLIN)
        try:
            while True:
                timeout = None
                if self._stop_at is not None:
                    timeout = max(0.0, self._stop_at - time.monotonic())
                ready, _, _ = select.select([fd, self._wake_read], [], [], timeout)
                if self._wake_read in ready:
                    os.read(self._wake_read, 64)
                if fd not in ready:
                    if self._stop_at is not None and time.monotonic() >= self._stop_at:
                        return
                    continue
                data, ended = _read(fd)
                if data and not ended:
                    chunks = [data]
                    gathered = len(data)
                    while gathered < BATCH_BYTES and waiting.poll(0):
                        data, ended = _read(fd)
                        chunks.append(data)
                        gathered += len(data)
                        if ended:
                            break
                    data = b"".join(chunks)
                if data:
                    self._deliver(data)
                if ended:
                    return
        finally:
            if self._copy is not None:
                self._copy.close()  # everything read is on the terminal when the pump ends
            with self._wake_lock:
                for own in (fd, self._wake_read, self._wake_write):
                    os.close(own)
                self._wake_write = -1

    def _deliver(self, data: bytes) -> None:
        if self._copy is not None:
            self._copy.put(data)
        if self.recorded >= self.record_limit:
            return
        if self.channel.crlf:
            data = data.replace(b"\r\n", b"\n")
        keep = data[: self.record_limit - self.recorded]
        self.recorded += len(keep)
        self.emit(
            protocol.output_frame(self.stream, time.monotonic_ns(), keep, compress=len(keep) > 512)
        )
        if self.recorded >= self.record_limit and self.on_truncated is not None:
            self.on_truncated(self.stream)


class Copier(threading.Thread):
    """Writes what a pump read on to memsight's own terminal (or stdout), in a thread of its
    own, so the pump goes back to reading at once: the target's writes then wait for
    memsight's reading only, not also for the terminal that shows them, which under plain
    python they would have reached in one step. At most QUEUED_BYTES behind; past that the
    pump waits, and the target with it, as for a terminal that does not keep up."""

    def __init__(self, fd: int, stream: int) -> None:
        super().__init__(name=f"memsight-copy-{stream}", daemon=True)
        self.fd = fd
        self._chunks: collections.deque[bytes] = collections.deque()
        self._queued = 0  # bytes put and not yet written
        self._closed = False
        self._changed = threading.Condition()

    def put(self, data: bytes) -> None:
        with self._changed:
            while self._queued >= QUEUED_BYTES:
                self._changed.wait()
            self._chunks.append(data)
            self._queued += len(data)
            self._changed.notify_all()

    def close(self) -> None:
        """Return once everything put has been written."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self.join()

    def run(self) -> None:
        while True:
            with self._changed:
                while not self._chunks and not self._closed:
                    self._changed.wait()
                if not self._chunks:
                    return
                data = b"".join(self._chunks)
                self._chunks.clear()
            _write_all(self.fd, data)
            with self._changed:
                self._queued -= len(data)
                self._changed.notify_all()


def _read(fd: int) -> tuple[bytes, bool]:
    """What `fd` has (it is readable), and whether its writers are all gone."""
    try:
        data = os.read(fd, READ_BYTES)
    except OSError as exc:
        if exc.errno == errno.EIO:  # pty: every writer has closed it
            return b"", True
        raise
    return data, not data


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except InterruptedError:
            continue
        except OSError:
            return  # our own stdout went away (closed pipe): keep recording regardless
        view = view[written:]


class FileTail:
    """What the target appends to a regular file it was given as stdout or stderr.

    The target writes to the file itself (memsight only inherits the fd to it), so its output
    keeps python's exact semantics; once the run is over memsight reads back the part written
    during the run, through a descriptor of its own (its own offset: the target's is never
    moved). The output's times are lost: it is recorded at the end of the run.
    """

    def __init__(self, fd: int, stream: int) -> None:
        self.stream = stream
        self.start = os.fstat(fd).st_size
        self.read_fd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)

    def collect(self, emit: Callable[[bytes], None], limit: int = RECORD_LIMIT) -> int:
        """Emit what was appended since the start (at most `limit` bytes); the bytes emitted."""
        try:
            end = os.fstat(self.read_fd).st_size
            data = os.pread(self.read_fd, max(0, min(end - self.start, limit)), self.start)
        except OSError:
            return 0
        finally:
            with contextlib.suppress(OSError):
                os.close(self.read_fd)
        if data:
            emit(protocol.output_frame(self.stream, time.monotonic_ns(), data, compress=True))
        return len(data)


def regular_file_tails(fds: dict[int, int]) -> list[FileTail]:
    """A FileTail for each of `fds` (fd -> stream) that is a regular file; one per file."""
    tails: list[FileTail] = []
    seen: set[tuple[int, int]] = set()
    for fd, stream in fds.items():
        try:
            info = os.fstat(fd)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) in seen:
            continue  # `> log 2>&1`: one file, read once
        seen.add((info.st_dev, info.st_ino))
        with contextlib.suppress(OSError):
            tails.append(FileTail(fd, stream))
    return tails
