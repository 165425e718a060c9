"""A session of the app that ends without Quit leaves a trace, and the next start says so.

faulthandler writes the Python stack of every thread to crash.log when the process dies of a
fatal signal (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL: a crash in Qt or a C extension, where
nothing else would be written), and an exception that reaches the top of the event loop is
written there too. Each session keeps a marker file named by its pid while it runs; a marker
whose process is gone at the next start is a session that ended without Quit (a crash, a kill,
a shutdown). Several instances may run at once: each has its own marker.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TextIO

LOG_NAME = "crash.log"
MARKER_SUFFIX = ".running"
KEEP_BYTES = 1 << 20  # a log over 1 MiB starts again: the last crashes are what matter


@dataclass(frozen=True)
class EndedSession:
    """A session that ended without Quit: its pid, and whether it left a trace in the log."""

    pid: int
    started: str
    traced: bool


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or another user's: not ours
        return False
    return True


def _marker(folder: Path, pid: int) -> Path:
    """The file session `pid` keeps in `folder` while it runs."""
    return folder / f"session-{pid}{MARKER_SUFFIX}"


class CrashLog:
    """The crash log and session markers in `folder` (the app's data folder)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / LOG_NAME
        self.marker = _marker(folder, os.getpid())
        self._log: TextIO | None = None
        self._previous_hook = sys.excepthook

    def ended_sessions(self) -> list[EndedSession]:
        """The sessions whose marker is left while their process is gone."""
        log = self.path.read_text(encoding="utf-8", errors="replace") if self.path.exists() else ""
        ended = []
        for marker in sorted(self.folder.glob(f"session-*{MARKER_SUFFIX}")):
            try:
                pid = int(marker.name[len("session-") : -len(MARKER_SUFFIX)])
                started = marker.read_text().strip()
            except (ValueError, OSError):
                continue
            if pid == os.getpid() or _alive(pid):
                continue
            header = _header(pid, started)
            after = log.split(header, 1)[1] if header in log else ""
            ended.append(EndedSession(pid, started, traced=bool(after.split("\n--- ")[0].strip())))
        return ended

    def take_ended(self) -> list[EndedSession]:
        """The sessions that ended without Quit, whose markers are then removed: each is told
        once."""
        if not self.folder.is_dir():
            return []
        ended = self.ended_sessions()
        for session in ended:
            _marker(self.folder, session.pid).unlink(missing_ok=True)
        return ended

    def start(self) -> None:
        """Begin this session's trace: its marker, and faulthandler and the exception hook
        writing to the log, until end()."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.path.exists() and self.path.stat().st_size > KEEP_BYTES:
            self.path.unlink()
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        self.marker.write_text(started + "\n")
        self._log = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (open for the session)
        self._log.write(_header(os.getpid(), started))
        self._log.flush()
        faulthandler.enable(self._log, all_threads=True)
        self._previous_hook = sys.excepthook
        sys.excepthook = self._exception

    def end(self) -> None:
        """The session ended through Quit: no trace is owed."""
        if self._log is None:
            return
        faulthandler.disable()
        sys.excepthook = self._previous_hook
        self._log.close()
        self._log = None
        self.marker.unlink(missing_ok=True)

    def _exception(
        self, kind: type[BaseException], value: BaseException, tb: TracebackType | None
    ) -> None:
        if self._log is not None:
            self._log.write("".join(traceback.format_exception(kind, value, tb)))
            self._log.flush()
        self._previous_hook(kind, value, tb)


def _header(pid: int, started: str) -> str:
    return f"--- memsight pid {pid}, started {started}\n"


def ended_message(ended: list[EndedSession], log: Path) -> str:
    """What the window says at start about sessions that ended without Quit ("" for none)."""
    if not ended:
        return ""
    traced = [s for s in ended if s.traced]
    last = ended[-1]
    text = f"memsight ended unexpectedly last time (pid {last.pid}, started {last.started})"
    if len(ended) > 1:
        text = f"{len(ended)} memsight sessions ended unexpectedly (the last: pid {last.pid})"
    if traced:
        return f"{text}: what it left is in {log}"
    return f"{text}, with no trace (killed, or the system shut down)"
