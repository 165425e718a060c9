"""The target's stdout and stderr: passed through live and recorded.

Each stream gets a pseudo-terminal when memsight's own stream is a terminal (so the target
line-buffers and sees isatty() just as under plain python), a pipe otherwise. A pump thread
copies what arrives to memsight's own stream and records it, up to `record_limit` bytes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import termios
import threading
import time
from collections.abc import Callable

from profiler import protocol

RECORD_LIMIT = 32 * 1024 * 1024


class StreamChannel:
    """One of the target's output streams: the fd the child writes, the fd we read."""

    def __init__(self, use_pty: bool, like_fd: int | None = None) -> None:
        self.is_pty = use_pty
        if use_pty:
            self.read_fd, self.child_fd = os.openpty()
            attrs = termios.tcgetattr(self.child_fd)
            attrs[1] &= ~termios.OPOST  # keep "\n" as-is; our own terminal adds the "\r"
            termios.tcsetattr(self.child_fd, termios.TCSANOW, attrs)
            if like_fd is not None:
                with contextlib.suppress(OSError):
                    size = fcntl.ioctl(like_fd, termios.TIOCGWINSZ, b"\0" * 8)
                    fcntl.ioctl(self.child_fd, termios.TIOCSWINSZ, size)
        else:
            self.read_fd, self.child_fd = os.pipe()

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

    def finish(self, grace_s: float) -> None:
        """Stop reading `grace_s` seconds from now, even if a grandchild still holds the pipe."""
        self._stop_at = time.monotonic() + grace_s
        with self._wake_lock:
            if self._wake_write >= 0:  # never write to a closed, possibly reused, descriptor
                with contextlib.suppress(OSError):
                    os.write(self._wake_write, b"x")

    def run(self) -> None:
        fd = self.channel.read_fd
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
                try:
                    data = os.read(fd, 65536)
                except OSError as exc:
                    if exc.errno == errno.EIO:  # pty: every writer has closed it
                        return
                    raise
                if not data:
                    return
                self._deliver(data)
        finally:
            with self._wake_lock:
                for own in (fd, self._wake_read, self._wake_write):
                    os.close(own)
                self._wake_write = -1

    def _deliver(self, data: bytes) -> None:
        if self.passthrough_fd is not None:
            _write_all(self.passthrough_fd, data)
        if self.recorded >= self.record_limit:
            return
        keep = data[: self.record_limit - self.recorded]
        self.recorded += len(keep)
        self.emit(
            protocol.output_frame(self.stream, time.monotonic_ns(), keep, compress=len(keep) > 512)
        )
        if self.recorded >= self.record_limit and self.on_truncated is not None:
            self.on_truncated(self.stream)


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
