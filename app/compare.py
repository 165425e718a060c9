"""The Compare panel: the shown run against another (File > Compare With..., or the run before
it), with the numbers `memsight compare` prints, from the same functions."""

from __future__ import annotations

from html import escape
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.recordings import recordings_dir
from app.session import RunSession
from app.statusbar import RunStatusBar
from app.timeline import TimelineView
from profiler.comparison import (
    SIGNIFICANT_BYTES,
    SIGNIFICANT_SHARE,
    Comparison,
    aligned_times,
    change_text,
    changes,
    compare,
    value_text,
)
from profiler.diagnosis import Finding
from profiler.launch.spec import RunSpec
from profiler.profile.model import Profile
from profiler.profile.storage import ProfileError, load_profile
from profiler.units import format_bytes


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


class Comparing:
    """The main window's comparing: File > Compare With..., a Shift-drop, the previous run.

    A mixin of MainWindow, which provides the attributes declared here."""

    profile: Profile | None
    session: RunSession
    timeline: TimelineView
    compare: ComparePanel
    compare_dock: QDockWidget
    status: RunStatusBar
    _previous: tuple[Profile, Path] | None

    def show_error(self, title: str, message: str) -> None: ...

    def _choose_comparison(self) -> None:
        if self.profile is None:
            self.show_error("Nothing to compare", "Open or record a run first.")
            return
        path, _ = QFileDialog.getOpenFileName(
            self,  # type: ignore[arg-type]  # a QMainWindow with this mixin
            "Compare With",
            str(recordings_dir()),
            "memsight profiles (*.memsight)",
        )
        if path:
            self.compare_with_file(path)

    def compare_with_file(self, path: str) -> bool:
        """Show the run of `path` beside the shown one: overlaid, with the numbers."""
        try:
            other = load_profile(path)
        except ProfileError as exc:
            self.show_error("Cannot compare", str(exc))
            return False
        return self.compare_with(other, Path(path))

    def compare_with_previous(self) -> None:
        if self._previous is not None and self.compare_with(*self._previous):
            self.status.compare_previous_button.hide()

    def compare_with(self, other: Profile, path: Path) -> bool:
        if self.profile is None or self.session.running:
            return False
        try:
            comparison = compare(other, self.profile)
        except Exception as exc:  # whatever a file holds, the app stays up
            self.show_error("Cannot compare", f"{path}: {type(exc).__name__}: {exc}")
            return False
        self.timeline.set_comparison(other, lambda t: aligned_times(comparison, t))
        self.compare.set_comparison(comparison, path.name)
        self.compare_dock.show()
        self.compare_dock.raise_()
        return True

    def stop_comparing(self) -> None:
        self.timeline.set_comparison(None)
        self.compare.set_comparison(None)
        self.compare_dock.hide()


def same_target(profile: Profile, spec: RunSpec) -> bool:
    """Whether a recorded run ran the script (or module) `spec` is about to run."""
    info = profile.info
    if spec.module:
        return info.module == spec.target
    if info.script is None:
        return False
    return Path(info.cwd, info.script).resolve() == Path(spec.cwd, spec.target).resolve()
