"""A pseudo-terminal that stands in for memsight's own terminal, so the target's output on it
can be recorded while the target sees a terminal exactly as under plain python.

The target gets one pty for every one of its fds 0/1/2 that is a terminal for memsight, and
that pty is its controlling terminal (it runs in a session of its own). What the target
writes is copied to the real terminal and recorded; what the user types is copied to the
pty with the real terminal in raw mode, so the pty's own line discipline does the echo, the
line editing and the signal keys for the target, just as the real terminal would have: the
target's termios changes (getpass, curses, tqdm) apply to the terminal it sees.

The window size follows the real terminal (sync_size() on SIGWINCH). The suspend key stops
the target and memsight together and gives the shell its prompt back; `fg` resumes both.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import termios
import threading
from collections.abc import Callable, Sequence
from typing import Any

STDIN = 0


def terminal_fds(fds: Sequence[int] = (0, 1, 2)) -> list[int]:
    """Those of `fds` that are terminals."""
    found = []
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.isatty(fd):
                found.append(fd)
    return found


class Terminal:
    """The pty given to the target in place of memsight's terminal fds `tty_fds`."""

    def __init__(self, tty_fds: Sequence[int]) -> None:
        self.tty_fds = list(tty_fds)
        self.real_fd = next(fd for fd in (1, 2, 0) if fd in self.tty_fds)
        self.master_fd, self.slave_fd = os.openpty()
        self.relays_input = STDIN in self.tty_fds
        self._saved: list[Any] | None = None
        self._wake_read, self._wake_write = os.pipe()
        self._input: threading.Thread | None = None
        self._child_pgid: int | None = None
        self.on_interrupt_key: Callable[[], None] | None = None
        # The target starts with the settings the user's terminal has (erase key, UTF-8...).
        with contextlib.suppress(termios.error):
            termios.tcsetattr(self.slave_fd, termios.TCSANOW, termios.tcgetattr(self.real_fd))
        if not self.relays_input:
            # Nothing puts the real terminal in raw mode, so it still turns "\n" into "\r\n":
            # the pty must not do it a second time.
            with contextlib.suppress(termios.error):
                attrs = termios.tcgetattr(self.slave_fd)
                attrs[1] &= ~termios.OPOST
                termios.tcsetattr(self.slave_fd, termios.TCSANOW, attrs)
        self.sync_size()

    # -- the child's side ----------------------------------------------------------------------

    def child_fd(self, fd: int) -> int | None:
        """What the target's `fd` should be: the pty, or None to inherit memsight's own."""
        return self.slave_fd if fd in self.tty_fds else None

    def make_controlling(self) -> None:
        """In the child, after setsid(): make the pty its controlling terminal."""
        fcntl.ioctl(self.tty_fds[0], termios.TIOCSCTTY, 0)

    def child_started(self, pid: int) -> None:
        """Close our copy of the pty's child end; start copying the user's input to it."""
        self._child_pgid = pid  # the target leads its own session and process group
        with contextlib.suppress(OSError):
            os.close(self.slave_fd)
        self.slave_fd = -1
        if self.relays_input:
            self.enter_raw()
            self._input = threading.Thread(
                target=self._relay_input, name="memsight-terminal-input", daemon=True
            )
            self._input.start()

    # -- the real terminal ---------------------------------------------------------------------

    def sync_size(self) -> None:
        """Give the pty the real terminal's window size (the kernel signals the target)."""
        with contextlib.suppress(OSError):
            size = fcntl.ioctl(self.real_fd, termios.TIOCGWINSZ, b"\0" * 8)
            fcntl.ioctl(self.master_fd, termios.TIOCSWINSZ, size)

    def enter_raw(self) -> None:
        if not self.relays_input:
            return
        with contextlib.suppress(termios.error):
            if self._saved is None:
                self._saved = termios.tcgetattr(STDIN)
            termios.tcsetattr(STDIN, termios.TCSADRAIN, _raw(self._saved))

    def restore(self) -> None:
        """Put the real terminal back as it was (safe to call more than once)."""
        if self._saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(STDIN, termios.TCSADRAIN, self._saved)

    def close(self) -> None:
        """Stop relaying input and restore the real terminal. The master is the pump's to close."""
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"x")
        if self._input is not None and self._input is not threading.current_thread():
            self._input.join(timeout=1.0)
        self.restore()
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- input ---------------------------------------------------------------------------------

    def _signal_keys(self) -> tuple[bytes, bytes]:
        """(interrupt key, suspend key) while the target's terminal turns keys into signals."""
        try:
            attrs = termios.tcgetattr(self.master_fd)
        except termios.error:
            return b"", b""
        if not attrs[3] & termios.ISIG:
            return b"", b""
        cc = attrs[6]
        return _key(cc[termios.VINTR]), _key(cc[termios.VSUSP])

    def _relay_input(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([STDIN, self._wake_read], [], [])
            except (OSError, ValueError):
                return
            if self._wake_read in ready:
                return
            try:
                data = os.read(STDIN, 4096)
            except OSError:
                return
            if not data:
                return
            interrupt, suspend = self._signal_keys()
            if suspend and suspend in data:
                before, _, after = data.partition(suspend)
                self._write(before)
                self._suspend()
                data = after
            self._write(data)
            if interrupt and interrupt in data and self.on_interrupt_key is not None:
                for _ in range(data.count(interrupt)):
                    self.on_interrupt_key()

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.master_fd, view) :]
            except InterruptedError:
                continue
            except OSError:
                return

    def _suspend(self) -> None:
        """The suspend key: stop the target and memsight, hand the terminal back to the shell."""
        pgid = self._child_pgid
        if pgid is not None:
            with contextlib.suppress(OSError):
                os.killpg(pgid, signal.SIGTSTP)
        self.restore()
        os.kill(os.getpid(), signal.SIGSTOP)  # returns when the shell continues us (`fg`)
        self.enter_raw()
        self.sync_size()
        if pgid is not None:
            with contextlib.suppress(OSError):
                os.killpg(pgid, signal.SIGCONT)


def _raw(attrs: list[Any]) -> list[Any]:
    """`attrs` in raw mode, as tty.setraw makes it (that module is not imported: a tty.py in
    the user's working directory could stand in for it when PYTHONPATH has an empty entry)."""
    raw = [*attrs[:6], list(attrs[6])]
    raw[0] &= ~(termios.BRKINT | termios.ICRNL | termios.INPCK | termios.ISTRIP | termios.IXON)
    raw[1] &= ~termios.OPOST
    raw[2] &= ~(termios.CSIZE | termios.PARENB)
    raw[2] |= termios.CS8
    raw[3] &= ~(termios.ECHO | termios.ICANON | termios.IEXTEN | termios.ISIG)
    raw[6][termios.VMIN] = 1
    raw[6][termios.VTIME] = 0
    return raw


def _key(value: object) -> bytes:
    if isinstance(value, bytes):
        return value if value not in (b"\0", b"\xff") else b""  # _POSIX_VDISABLE
    return b""
