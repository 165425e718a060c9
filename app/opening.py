"""Reading a large profile behind its overview (File > Open of a day-long run).

A profile with a stored overview (profiler/profile/overview.py) is shown from it at once, and
read whole in a worker thread, which also makes the timeline's curves ready and indexes the
phases (taking in and thinning 8.6 million samples held the window still for two seconds,
and sorting the phases held the first pan after it a quarter of one); the whole profile
then takes the overview's place. The read comes back in the GUI thread; one for a file no
longer wanted (another was opened, a run started, the window closed) is dropped.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from PySide6.QtCore import QObject, QTimer, Signal

from memsight.app.maincurves import PreparedCurves, prepare_curves
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.spanindex import index_phases
from memsight.profiler.profile.storage import ProfileError, load_profile

POLL_MS = 40


class ProfileReader(QObject):
    """Reads one profile file at a time in a worker thread.

    `loaded` carries the profile, its path and its curves made ready (None when they could
    not be: the timeline then takes the rows in itself, and says what fails); `failed` a
    title and a one-line message, as the window shows a failed open.
    """

    loaded = Signal(object, str, object)
    failed = Signal(str, str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="open")
        self._pending: tuple[Future[tuple[Profile, PreparedCurves | None]], str] | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._poll)

    @property
    def reading(self) -> str | None:
        """The path being read, or None."""
        return self._pending[1] if self._pending is not None else None

    def read(self, path: str) -> None:
        self.cancel()
        self._pending = (self._executor.submit(_read, path), path)
        self._timer.start()

    def cancel(self) -> None:
        """Drop the read under way: its result, when it comes, is not shown."""
        if self._pending is not None:
            self._pending[0].cancel()
        self._pending = None
        self._timer.stop()

    def join(self) -> None:
        """Block until the read under way has ended, its result not yet handed on (tests and
        benchmarks; the window never waits)."""
        if self._pending is not None:
            self._pending[0].exception()

    def wait(self) -> None:
        """Block until the read under way has ended and its result is handed on."""
        self.join()
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
            profile, prepared = job.result()
        except ProfileError as exc:
            self.failed.emit("Cannot open profile", str(exc))
            return
        except MemoryError:
            self.failed.emit("Cannot open profile", f"{path}: not enough memory to load it")
            return
        except Exception as exc:  # whatever a file holds, the app stays up
            self.failed.emit("Cannot open profile", f"{path}: {type(exc).__name__}: {exc}")
            return
        self.loaded.emit(profile, path, prepared)


def _read(path: str) -> tuple[Profile, PreparedCurves | None]:
    """The profile at `path` with its main curves made ready and its phases indexed, in the
    worker thread."""
    profile = load_profile(path)
    try:
        index_phases(profile.spans)  # kept with the table (spanindex.span_index)
        return profile, prepare_curves(profile)
    except Exception:  # whatever a file holds: the timeline tries again and says what fails
        return profile, None
