"""The target's stdout and stderr, live, bounded and searchable (view of Profile.output)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import (
    QColor,
    QKeySequence,
    QShortcut,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
)
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from profiler import protocol
from profiler.profile.model import Profile
from profiler.profile.series import MARK_COLORS
from profiler.profile.summary import unrecorded_output

MAX_LINES = 20_000


class ConsoleView(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setMaximumBlockCount(MAX_LINES)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setObjectName("console")
        self.search = QLineEdit()
        self.search.setPlaceholderText("Find in output (Enter: next, Shift+Enter: previous)")
        self.search.setClearButtonEnabled(True)
        self.matches = QLabel("")
        previous, following = QToolButton(), QToolButton()
        previous.setText("↑")
        following.setText("↓")
        previous.setToolTip("Previous match (Shift+Enter)")
        following.setToolTip("Next match (Enter)")
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(self.search, 1)
        bar.addWidget(self.matches)
        bar.addWidget(previous)
        bar.addWidget(following)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(bar)
        layout.addWidget(self.text, 1)
        self.search.textChanged.connect(self._highlight)
        self.search.returnPressed.connect(lambda: self.find_text(backward=False))
        following.clicked.connect(lambda: self.find_text(backward=False))
        previous.clicked.connect(lambda: self.find_text(backward=True))
        QShortcut(QKeySequence("Shift+Return"), self.search, lambda: self.find_text(backward=True))
        self._shown = 0
        self._profile: Profile | None = None
        self._stderr = QTextCharFormat()
        self._stderr.setForeground(QColor(MARK_COLORS["error"]))
        self._stdout = QTextCharFormat()

    def set_profile(self, profile: Profile | None) -> None:
        self._profile = profile
        self._shown = 0
        self.text.clear()
        # A profile recorded with `memsight run > log` has no output to show: say why.
        self.text.setPlaceholderText((unrecorded_output(profile) or "") if profile else "")
        self.refresh()

    def refresh(self) -> None:
        profile = self._profile
        if profile is None or self._shown >= len(profile.output):
            return
        scrollbar = self.text.verticalScrollBar()
        at_bottom = scrollbar.value() >= scrollbar.maximum() - 2
        cursor = QTextCursor(self.text.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        for chunk in profile.output[self._shown :]:
            fmt = self._stderr if chunk.stream == protocol.STDERR else self._stdout
            cursor.insertText(chunk.text.replace("\r\n", "\n"), fmt)
        self._shown = len(profile.output)
        if at_bottom:
            scrollbar.setValue(scrollbar.maximum())
        if self.search.text():
            self._highlight(self.search.text())

    def find_text(self, backward: bool = False) -> bool:
        needle = self.search.text()
        if not needle:
            return False
        flags = QTextDocument.FindFlag.FindBackward if backward else QTextDocument.FindFlag(0)
        if self.text.find(needle, flags):
            return True
        cursor = self.text.textCursor()  # wrap around
        cursor.movePosition(
            QTextCursor.MoveOperation.End if backward else QTextCursor.MoveOperation.Start
        )
        self.text.setTextCursor(cursor)
        return self.text.find(needle, flags)

    def _highlight(self, needle: str) -> None:
        selections: list[QTextEdit.ExtraSelection] = []
        if needle:
            fmt = QTextCharFormat()
            fmt.setBackground(QColor(255, 213, 79, 140))
            document = self.text.document()
            cursor = document.find(needle, 0)
            while not cursor.isNull() and len(selections) < 2000:
                selection = QTextEdit.ExtraSelection()
                selection.cursor = cursor
                selection.format = fmt
                selections.append(selection)
                cursor = document.find(needle, cursor)
        self.text.setExtraSelections(selections)
        self.matches.setText(f"{len(selections)} found" if needle else "")
        self.matches.setAlignment(Qt.AlignmentFlag.AlignVCenter)
