"""The Compare panel: the shown run against another (File > Compare With..., or the run before
it), with the numbers `memsight compare` prints, from the same functions; and the
CompareController that computes it off the GUI thread."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from html import escape
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import (
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from memsight.app.findings import FindingsPanel
from memsight.app.timeline import TimelineView
from memsight.profiler.comparison import (
    SIGNIFICANT_BYTES,
    SIGNIFICANT_SHARE,
    Comparison,
    aligned_times,
    change_text,
    changes,
    compare,
    value_text,
)
from memsight.profiler.diagnosis import Finding
from memsight.profiler.launch.spec import RunSpec
from memsight.profiler.profile.model import Profile
from memsight.profiler.units import format_bytes


class ComparePanel(QWidget):
    """What changed between the compared run (before) and the shown one (after)."""

    closeRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.comparison: Comparison | None = None
        self.title = QLabel("Not comparing")
        self.title.setWordWrap(True)
        self.stop = QPushButton("Stop Comparing")
        self.stop.clicked.connect(self.closeRequested)
        self.text = QTextBrowser()
        self.text.setOpenLinks(False)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.stop)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.text, 1)

    def set_waiting(self, before_name: str) -> None:
        """A comparison is on its way: say with what, until it comes."""
        self.comparison = None
        self.stop.setEnabled(True)
        self.title.setText(f"Comparing this run with {before_name}…")
        self.text.clear()

    def set_comparison(self, c: Comparison | None, before_name: str = "") -> None:
        self.comparison = c
        self.stop.setEnabled(c is not None)
        if c is None:
            self.title.setText("Not comparing")
            self.text.clear()
            return
        self.title.setText(f"This run against {before_name} (dashed grey on the plots)")
        self.text.setHtml(comparison_html(c))


def comparison_html(c: Comparison) -> str:
    """The table and the findings, every string from the runs escaped."""
    rows = "".join(
        f"<tr><td>{escape(ch.label)}</td><td align='right'>{escape(value_text(ch, ch.before))}"
        f"</td><td align='right'>{escape(value_text(ch, ch.after))}</td>"
        f"<td align='right'>{escape(change_text(ch))}</td></tr>"
        for ch in changes(c)
    )
    parts = [
        "<table cellspacing='4'><tr><th align='left'>what</th><th align='right'>before</th>"
        f"<th align='right'>now</th><th align='right'>change</th></tr>{rows}</table>"
    ]
    if not c.same_script:
        parts.append(
            "<p>The runs are of different scripts: the numbers compare, the code may not.</p>"
        )
    f = c.findings
    for word, found in (("Resolved", f.resolved), ("New", f.new)):
        parts += _findings(word, found)
    parts += _findings("Still there", [after for _before, after in f.still])
    parts.append(
        f"<p style='color:gray'>* a change of at least {100 * SIGNIFICANT_SHARE:g} % and "
        f"{escape(format_bytes(SIGNIFICANT_BYTES))}; smaller ones are noise between two "
        "recordings of one script.</p>"
    )
    return "".join(parts)


def _findings(word: str, found: list[Finding]) -> list[str]:
    if not found:
        return []
    items = "".join(
        f"<li>[{escape(x.severity)}] <code>{escape(x.rule)}</code> {escape(x.heading)}</li>"
        for x in found
    )
    return [f"<p><b>{word}</b></p><ul>{items}</ul>"]


class CompareController(QObject):
    """The window's comparing (File > Compare With..., a Shift-drop, the run before): the shown
    run against another, overlaid on the plots with the numbers of `memsight compare`.

    Comparing diagnoses both runs, which takes seconds on a long run: it runs in a worker
    thread, and the shown run's findings are the Findings panel's when it has the final ones.
    The result comes back in the GUI thread; one for a run no longer shown is dropped.
    `failed` carries a title and a one-line message for the window to show.
    """

    failed = Signal(str, str)

    def __init__(
        self,
        timeline: TimelineView,
        panel: ComparePanel,
        dock: QDockWidget,
        findings: FindingsPanel,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._timeline, self._panel, self._dock, self._findings = timeline, panel, dock, findings
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compare")
        self._pending: tuple[Future[Comparison], Profile, Path] | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(40)
        self._timer.timeout.connect(self._poll)

    @property
    def busy(self) -> bool:
        return self._pending is not None

    def compare(self, shown: Profile, other: Profile, path: Path) -> None:
        """Compare `other` (before) with `shown` (after); the panel says so until it is done."""
        findings = self._findings
        known = findings.diagnosis if findings.profile is shown and findings.final else None
        job = self._executor.submit(compare, other, shown, None, known)
        self._pending = (job, other, path)
        self._panel.set_waiting(path.name)
        self._dock.show()
        self._dock.raise_()
        self._timer.start()

    def stop(self) -> None:
        """Put the comparison away, and drop one still on its way."""
        self._pending = None
        self._timer.stop()
        self._timeline.set_comparison(None)
        self._panel.set_comparison(None)
        self._dock.hide()

    def shutdown(self) -> None:
        self._pending = None
        self._timer.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _poll(self) -> None:
        if self._pending is None or not self._pending[0].done():
            return
        job, other, path = self._pending
        self._pending = None
        self._timer.stop()
        try:
            comparison = job.result()
        except Exception as exc:  # whatever a file holds, the app stays up
            self._panel.set_comparison(None)
            self._dock.hide()
            self.failed.emit("Cannot compare", f"{path}: {type(exc).__name__}: {exc}")
            return
        self._timeline.set_comparison(other, lambda t: aligned_times(comparison, t))
        self._panel.set_comparison(comparison, path.name)


def same_target(profile: Profile, spec: RunSpec) -> bool:
    """Whether a recorded run ran the script (or module) `spec` is about to run."""
    info = profile.info
    if spec.module:
        return info.module == spec.target
    if info.script is None:
        return False
    return Path(info.cwd, info.script).resolve() == Path(spec.cwd, spec.target).resolve()
