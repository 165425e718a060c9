"""Work that waits for a widget's next paint to end, so the two never share the CPU.

A live run's tick changes the timeline; the timeline is painted just after, in the same turn
of the event loop. Work handed to a worker thread during the tick (the rules over the run so
far) would take the GIL and a core from that paint: on a 2-core machine a 1 kHz run's
end-of-run paint went from 12 ms to 18-21 ms beside a 30 ms diagnosis. Started once the paint
has returned, the same work fits in the gap before the next tick.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QWidget

# The longest a call waits for a paint. A tick that changed nothing on screen brings none; a
# paint that comes brings the call sooner. Well under a person's notice of findings' delay.
NO_PAINT_WAIT_MS = 100


class AfterPaint(QObject):
    """Calls what `call` is handed once `widget`'s next paint has returned: at once (in the
    event loop's next turn) when the widget is not on screen, and after NO_PAINT_WAIT_MS when
    no paint comes."""

    def __init__(self, widget: QWidget, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._widget = widget
        self._waiting: list[Callable[[], None]] = []
        self._no_paint = QTimer(self)
        self._no_paint.setSingleShot(True)
        self._no_paint.setInterval(NO_PAINT_WAIT_MS)
        self._no_paint.timeout.connect(self._run)
        widget.installEventFilter(self)

    @property
    def waiting(self) -> int:
        """How many calls wait for the paint."""
        return len(self._waiting)

    def call(self, work: Callable[[], None]) -> None:
        self._waiting.append(work)
        if not self._widget.isVisible():  # no paint will come: the next turn of the loop
            self._run_next_turn()
        elif not self._no_paint.isActive():
            self._no_paint.start()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint and self._waiting:
            # The paint is handled when this returns; a queued call runs once it has been.
            self._run_next_turn()
        return False

    def _run_next_turn(self) -> None:
        # With this object as the context: a window deleted before that turn (closed at a
        # run's end) drops the call, which would otherwise reach its deleted timer.
        QTimer.singleShot(0, self, self._run)

    def _run(self) -> None:
        self._no_paint.stop()
        waiting, self._waiting = self._waiting, []
        for work in waiting:
            work()
