"""Helpers for tests that drive processes: their state in /proc, killing them, a
pseudo-terminal that delivers a real Ctrl+C, and what a started app wrote to its settings."""

from __future__ import annotations

import contextlib
import os
import pty
import signal
import subprocess
import termios
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.load import deadline
from tests.support import wait_until


def process_state(pid: int) -> str | None:
    """The /proc state letter of `pid` (R, S, Z, ...), or None when no such process exists."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    rest = stat[stat.rfind(b")") + 2 :].split()
    return rest[0].decode() if rest else None


def is_running(pid: int) -> bool:
    """True while `pid` is a live process; a zombie (dead, not yet reaped) counts as gone."""
    state = process_state(pid)
    return state is not None and state not in ("Z", "X")


def wait_gone(pids: Sequence[int], timeout: float = 5.0) -> None:
    wait_until(
        lambda: not any(is_running(p) for p in pids), timeout, f"processes {list(pids)} to end"
    )


def kill_quietly(pid: int | None, sig: int = signal.SIGKILL) -> None:
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def killpg_quietly(pgid: int | None, sig: int = signal.SIGKILL) -> None:
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


class PtyProcess:
    """A process whose stdin, stdout and stderr are a pseudo-terminal it has as its controlling
    terminal, in a session of its own, so that writing b"\\x03" delivers a real Ctrl+C."""

    def __init__(self, argv: Sequence[str], cwd: Path, **popen: Any) -> None:
        self.master, slave = pty.openpty()
        try:
            self.process = subprocess.Popen(
                list(argv),
                cwd=cwd,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                start_new_session=True,
                preexec_fn=_take_controlling_terminal,  # runs after setsid()
                close_fds=True,
                **popen,
            )
        finally:
            os.close(slave)
        self._output = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: every process holding the terminal has gone
                return
            if not data:
                return
            with self._lock:
                self._output += data

    @property
    def output(self) -> bytes:
        with self._lock:
            return bytes(self._output)

    def wait_for_output(self, needle: bytes, timeout: float = 15.0) -> None:
        wait_until(lambda: needle in self.output, timeout, f"{needle!r} on the terminal")

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def wait(self, timeout: float = 15.0) -> int:
        code = self.process.wait(timeout=deadline(timeout))
        self._reader.join(timeout=5.0)
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            killpg_quietly(self.process.pid)
            self.process.wait(timeout=10.0)
        self._reader.join(timeout=5.0)
        if not self._reader.is_alive():  # never pull the fd from under a blocked read
            with contextlib.suppress(OSError):
                os.close(self.master)


def _take_controlling_terminal() -> None:
    import fcntl

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def wait_for_setting(
    app: subprocess.Popen[bytes], home: Path, text: str, timeout: float = 30.0
) -> str:
    """Until the app, started with HOME and XDG_CONFIG_HOME=HOME/config, has written `text`
    into its settings file; returns the file's content. Fails at once if the app exits."""
    settings = home / "config" / "memsight" / "memsight.conf"

    def written() -> str | None:
        assert app.poll() is None, app.stdout.read().decode() if app.stdout else ""
        content = settings.read_text() if settings.exists() else ""
        return content if text in content else None

    content = wait_until(written, timeout, f"{text} in {settings}")
    assert content is not None
    return content


def record_in_terminal(
    args: Sequence[str | os.PathLike[str]], cwd: Path, timeout: float = 120.0
) -> tuple[int, bytes]:
    """`memsight ARGS...` in a terminal of its own, where the script's output is recorded
    (with pipes or files it goes straight there, unrecorded); (exit status, what it showed)."""
    from tests.support import memsight_command

    session = PtyProcess(memsight_command(*args), cwd)
    try:
        code = session.wait(timeout)
    finally:
        session.close()
    return code, session.output
