"""Helpers for the reliability tests: real scripts, real processes, real profile files.

Nothing here sleeps and hopes: every wait polls a condition every POLL_S up to a deadline.
"""

from __future__ import annotations

import contextlib
import os
import pty
import signal
import subprocess
import sys
import termios
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from profiler.model import Profile
from profiler.storage import ProfileError, load_profile

POLL_S = 0.02
MEMSIGHT = [sys.executable, "-m", "profiler.cli"]

T = TypeVar("T")


def write_script(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


def memsight_command(*args: str | os.PathLike[str]) -> list[str]:
    return [*MEMSIGHT, *(os.fspath(a) for a in args)]


def run_memsight(
    *args: str | os.PathLike[str], cwd: Path, timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    """Run `memsight ARGS...` to completion, capturing its output."""
    return subprocess.run(
        memsight_command(*args),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def wait_until(condition: Callable[[], T], timeout: float = 10.0, what: str = "the condition") -> T:
    """Poll `condition` every POLL_S until it returns something truthy; return that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL_S)


def try_load(path: Path) -> Profile | None:
    """The profile as it stands on disk now, or None while it holds too little to load."""
    try:
        return load_profile(path)
    except ProfileError:
        return None


def ram_seconds(profile: Profile | None) -> float:
    """Seconds (since t0) of the last ram sample in `profile`; -1 when there is none."""
    if profile is None or profile.ram is None or not len(profile.ram):
        return -1.0
    return float(profile.ram.t[-1])


def wait_for_samples(path: Path, seconds: float, timeout: float = 15.0) -> Profile:
    """Wait until the profile file on disk holds ram samples reaching `seconds` after t0."""

    def enough() -> Profile | None:
        profile = try_load(path)
        return profile if ram_seconds(profile) >= seconds else None

    return wait_until(enough, timeout, f"{seconds} s of samples in {path.name}")


def seconds_since_t0(profile: Profile, monotonic_ns: int) -> float:
    assert profile.info.t0_ns is not None
    return (monotonic_ns - profile.info.t0_ns) / 1e9


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


def one_line(text: str) -> bool:
    return "\n" not in text.rstrip("\n") and text.strip() != ""


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
        code = self.process.wait(timeout=timeout)
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
