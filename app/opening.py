"""Reading a large profile behind its overview (File > Open of a day-long run).

A profile with a stored overview (profiler/profile/overview.py) is shown from it at once, and
read whole in a worker thread; the whole profile then takes the overview's place. The read
comes back in the GUI thread; one for a file no longer wanted (another was opened, a run
started, the window closed) is dropped.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from PySide6.QtCore import QObject, QTimer, Signal

from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.storage import ProfileError, load_profile

POLL_MS = 40


class ProfileReader(QObject):
    """Reads one profile file at a time in a worker thread.

    `loaded` carries the profile and its path; `failed` a title and a one-line message, as
    the window shows a failed open.
    """

    loaded = Signal(object, str)
    failed = Signal(str, str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="open")
        self._pending: tuple[Future[Profile], str] | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._poll)

    @property
    def reading(self) -> str | None:
        """The path being read, or None."""
        return self._pending[1] if self._pending is not None else None

    def read(self, path: str) -> None:
        self.cancel()
        self._pending = (self._executor.submit(load_profile, path), path)
        self._timer.start()

    def cancel(self) -> None:
        """Drop the read under way: its result, when it comes, is not shown."""
        if self._pending is not None:
            self._pending[0].cancel()
        self._pending = None
        self._timer.stop()

    def wait(self) -> None:
        """Block until the read under way has ended and its result is handed on (tests and
        benchmarks; the window never waits)."""
        if self._pending is not None:
            self._pending[0].exception()
            self._poll()

    def shutdown(self) -> None:
        self.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _poll(self) -> None:
        if self._pending is None or not self._pending[0].done():
            return
        job, path = self._pending
        self.cancel()
        try:
            profile = job.result()
        except ProfileError as exc:
            self.failed.emit("Cannot open profile", str(exc))
            return
        except MemoryError:
            self.failed.emit("Cannot open profile", f"{path}: not enough memory to load it")
            return
        except Exception as exc:  # whatever a file holds, the app stays up
            self.failed.emit("Cannot open profile", f"{path}: {type(exc).__name__}: {exc}")
            return
        self.loaded.emit(profile, path)
