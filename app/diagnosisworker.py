"""The rules over the run shown, in a worker thread, started between the timeline's paints.

The view half is findings.FindingsPanel; this half decides when the rules run and hands their
answer back in the GUI thread.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QWidget

from memsight.app.afterpaint import AfterPaint
from memsight.profiler.diagnosis import Diagnosis, diagnose, one_line_error
from memsight.profiler.profile.model import Profile

# Rules run one at a time in the app, however long the run: in threads of their own they
# kept both cores of a 2-core machine and the GIL from the GUI thread, and a pan across a
# day-long run just opened had frames of 30-59 ms while they ran (27-43 ms at worst with
# one; the findings come as soon, 0.9-1.2 s after the whole run is shown, since the GUI
# thread takes the second core anyway). benchmarks/README.md.
APP_RULE_THREADS = 1


class BackgroundDiagnosis(QObject):
    """Runs the rules on a snapshot of the profile in a worker thread.

    On a long run the rules take tens of milliseconds, more than a frame; in a thread they
    never hold up drawing. Given the timeline (`stay_out_of_paints`), a request made while a
    tick changes it starts once its paint has returned, so the rules never share the CPU with
    that paint. Results come back in request order through `ready`, emitted in the GUI
    thread; a result for a profile no longer shown is dropped.
    """

    ready = Signal(object, object, bool)  # profile, Diagnosis, final

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="diagnosis")
        self._pending: list[tuple[Future[Diagnosis], Profile, bool]] = []
        self._after_paint: AfterPaint | None = None
        self._current: Profile | None = None
        self._closed = False
        self._timer = QTimer(self)
        self._timer.setInterval(40)
        self._timer.timeout.connect(self._poll)

    def stay_out_of_paints(self, widget: QWidget) -> None:
        """Start each request's rules only once `widget`'s next paint has returned."""
        self._after_paint = AfterPaint(widget, self)

    @property
    def busy(self) -> bool:
        """Rules asked for and not answered yet (waiting for a paint, or running)."""
        return bool(self._pending) or (
            self._after_paint is not None and self._after_paint.waiting > 0
        )

    def request(self, profile: Profile, final: bool) -> None:
        if self._closed:
            return  # the window is closing; a run finishing meanwhile needs no findings
        self._current = profile
        snapshot = profile.snapshot()  # the run as it stands now, whenever the rules start

        def start() -> None:
            if self._closed:
                return
            job = self._executor.submit(diagnose, snapshot, threads=APP_RULE_THREADS)
            self._pending.append((job, profile, final))
            self._timer.start()

        if self._after_paint is None:
            start()
        else:
            self._after_paint.call(start)

    def forget(self) -> None:
        """Drop results still on their way (the profile is being replaced)."""
        self._current = None

    def _poll(self) -> None:
        while self._pending and self._pending[0][0].done():
            job, profile, final = self._pending.pop(0)
            if profile is not self._current:
                continue
            try:
                diagnosis = job.result()
            except Exception as exc:  # outside any one rule: said, never a panel left waiting
                diagnosis = Diagnosis(failed={"every rule": one_line_error(exc)})
            self.ready.emit(profile, diagnosis, final)
        if not self._pending:
            self._timer.stop()

    def shutdown(self) -> None:
        self._closed = True
        self._timer.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)
