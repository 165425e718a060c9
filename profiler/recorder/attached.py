"""The target as a process memsight did not start (`memsight attach`): watched, never touched.

It is not memsight's child, so its exit status is its parent's alone; memsight sees that it
is gone (a pidfd where Linux has them, else /proc) and records that it exited. It gets no
signal from memsight: Ctrl+C and --duration end the recording (detach), not the process.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections.abc import Callable

from memsight.profiler.recorder import proctree
from memsight.profiler.recorder.terminal import Terminal

POLL_S = 0.1  # where there is no pidfd: how often /proc is looked at


class AttachedTarget:
    """Target's interface (recorder/target.py) for a running process; see the module."""

    terminal: Terminal | None = None
    on_interrupt_key: Callable[[], None] | None = None
    shares_process_group = False  # no signal of memsight's is ever passed on to it
    own_session = True

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._start = proctree.identity(pid)
        self._leave = threading.Event()
        self.exited = False
        self._pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            self._pidfd = os.pidfd_open(pid)

    @property
    def pid(self) -> int | None:
        return self._pid

    def alive(self) -> bool:
        """The same process is still there (not a new one that reuses its pid)."""
        now = proctree.identity(self._pid)
        if now is None or self._start is None or now.start != self._start.start:
            return False
        return not _is_zombie(self._pid)

    def poll(self) -> bool:
        """True while it runs and the recording goes on."""
        return not self._leave.is_set() and not self.exited and self.alive()

    def detach(self) -> None:
        """End the recording; the process goes on."""
        self._leave.set()

    @property
    def detaching(self) -> bool:
        return self._leave.is_set()

    def wait(self) -> int | None:
        """Until the process exits or detach() is called; its status is not known: None."""
        while not self._leave.is_set():
            if self._pidfd is not None:
                readable, _, _ = select.select([self._pidfd], [], [], POLL_S)
                if readable:
                    break
            elif self._leave.wait(POLL_S):
                break
            if not self.alive():
                break
        if not self._leave.is_set() or not self.alive():
            self.exited = True
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None
        return None

    # What a launched target does that an attached one must not: nothing of these touches it.
    def become_subreaper(self) -> None: ...
    def sync_terminal_size(self) -> None: ...
    def restore_terminal(self) -> None: ...
    def send_input(self, data: bytes) -> None: ...
    def close_input(self) -> None: ...
    def send_signal(self, signum: int) -> None: ...
    def reap_orphans(self) -> None: ...
    def close_terminal(self) -> None: ...
    def collect_file_output(self, emit: Callable[[bytes], None]) -> None: ...
    def end_orphans(self) -> None: ...

    def stop(self, grace_s: float = 0.0) -> None:
        self.detach()

    def kill_tree(self, known: dict[int, int] | None = None) -> None:
        self.detach()


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[:1] == [b"Z"]
    except OSError:
        return False
