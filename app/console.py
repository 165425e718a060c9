"""The target's stdout and stderr, live, bounded and searchable (view of Profile.output)."""

from __future__ import annotations

import bisect

from PySide6.QtCore import Qt, Signal
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

from memsight.profiler import protocol
from memsight.profiler.profile.model import OutputChunk, Profile
from memsight.profiler.profile.series import MARK_COLORS
from memsight.profiler.profile.summary import unrecorded_output

# The console holds a bounded tail of the output, so that no output, however large, can make
# the window slow: the last MAX_LINES lines, at most MAX_CHARS characters in all, each line cut
# after MAX_LINE_CHARS characters (with a note saying so). The profile keeps it all.
MAX_LINES = 20_000
MAX_LINE_CHARS = 2_000
MAX_CHARS = 2_000_000
NOTE = -1  # a piece of text that is memsight's own note, not the target's output
INPUT_COLOR = "#2f7fd8"  # the lines typed to the script, echoed as a terminal would
INPUT_PLACEHOLDER = "Input to the script (Enter sends the line, Ctrl+D ends it)"
WAITING_PLACEHOLDER = "The script waits for this input: type a line, Enter sends it"


def _cut_note() -> str:
    return f" … [line cut: longer than {MAX_LINE_CHARS:,} characters]"


class OutputTail:
    """Turns the target's output, chunk by chunk, into the pieces the console shows.

    Work and result are bounded whatever the output: a batch with more lines than the console
    keeps is read from its end (str.rfind, in C), and only the lines kept are copied, each up
    to MAX_LINE_CHARS. Pieces are (text, stream), stream being protocol.STDOUT, STDERR or NOTE.
    """

    def __init__(self) -> None:
        self.line_chars = 0  # characters shown of the line being written
        self.cut = False  # that line was cut: the rest of it is skipped

    def take(self, chunks: list[OutputChunk]) -> list[tuple[str, int]]:
        if not chunks:
            return []
        starts, streams, texts = [], [], []
        offset = 0
        for chunk in chunks:
            # CR starts a new line, as it does in the text widget; CRLF is one line end.
            normal = chunk.text.replace("\r\n", "\n").replace("\r", "\n")
            starts.append(offset)
            streams.append(chunk.stream)
            texts.append(normal)
            offset += len(normal)
        text = "".join(texts)
        pieces: list[tuple[str, int]] = []

        def emit(piece: str, stream: int) -> None:
            if pieces and pieces[-1][1] == stream:
                pieces[-1] = (pieces[-1][0] + piece, stream)
            elif piece:
                pieces.append((piece, stream))

        def emit_range(a: int, b: int) -> None:
            i = bisect.bisect_right(starts, a) - 1
            while a < b:
                end = min(b, starts[i + 1] if i + 1 < len(starts) else b)
                emit(text[a:end], streams[i])
                a, i = end, i + 1

        start = self._first_kept(text)
        pos = start
        if start > 0:
            skipped = text.count("\n", 0, start)
            if self.line_chars or self.cut:
                emit("\n", streams[0])
            emit(
                f"… {skipped:,} earlier lines not shown (the console keeps the last "
                f"{MAX_LINES:,})\n",
                NOTE,
            )
            self.line_chars, self.cut = 0, False
        while pos < len(text):
            newline = text.find("\n", pos)
            end = newline if newline >= 0 else len(text)
            if not self.cut:
                room = MAX_LINE_CHARS - self.line_chars
                taken = min(end - pos, room)
                emit_range(pos, pos + taken)
                self.line_chars += taken
                if end - pos > room:
                    self.cut = True
                    emit(_cut_note(), NOTE)
            if newline < 0:
                break
            emit_range(newline, newline + 1)
            self.line_chars, self.cut = 0, False
            pos = newline + 1
        return pieces

    @staticmethod
    def _first_kept(text: str) -> int:
        """Where the lines the console will keep begin: the last MAX_LINES lines, or fewer
        when their shown (cut) length passes MAX_CHARS."""
        pos, lines, shown = len(text), 0, 0
        while True:
            newline = text.rfind("\n", 0, pos)
            shown += min(pos - newline - 1, MAX_LINE_CHARS) + 1
            lines += 1
            if newline < 0:
                return 0
            if lines > MAX_LINES or shown > MAX_CHARS:
                return newline + 1
            pos = newline


class ConsoleView(QWidget):
    # A line typed into the input field, to the running script's stdin ("\n" included), and
    # Ctrl+D there: end of file.
    inputEntered = Signal(str)
    inputClosed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setMaximumBlockCount(MAX_LINES + 2)  # and a note, and the line being written
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
        # The script's stdin while it runs: a line at a time, as a terminal would send it.
        self.input = QLineEdit()
        self.input.setPlaceholderText(INPUT_PLACEHOLDER)
        self.input.setEnabled(False)
        # Shown while the script is blocked reading its stdin: a terminal would show the
        # cursor after the prompt; here the prompt is one line among the output.
        self.waiting = QLabel("Waiting for input ⏎")
        self.waiting.setStyleSheet(f"color: {INPUT_COLOR}; font-weight: bold;")
        self.waiting.hide()
        input_row = QHBoxLayout()
        input_row.setContentsMargins(0, 0, 0, 0)
        input_row.addWidget(self.waiting)
        input_row.addWidget(self.input, 1)
        self.input.returnPressed.connect(self._send_line)
        QShortcut(QKeySequence("Ctrl+D"), self.input, self._close_input)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(bar)
        layout.addWidget(self.text, 1)
        layout.addLayout(input_row)
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
        self._note = QTextCharFormat()
        self._note.setForeground(QColor("gray"))
        self._note.setFontItalic(True)
        self._input_format = QTextCharFormat()
        self._input_format.setForeground(QColor(INPUT_COLOR))
        self._input_format.setFontWeight(700)
        self._tail = OutputTail()

    def set_input_open(self, open_: bool) -> None:
        """Whether the input line sends to a running script. Opened, it takes the keyboard, as
        a terminal running the script would: what is typed goes to the script."""
        if open_:
            self.input.setEnabled(True)
            self.input.setFocus()
            return
        # Closed with the keyboard in it: the focus goes nowhere rather than to the next
        # widget, which Qt would pick (the Findings list, whose focus selects its first
        # finding: an ended run would show one finding instead of the overview).
        if self.input.hasFocus():
            self.input.clearFocus()
        self.set_waiting(False)
        self.input.setEnabled(False)
        self.input.clear()

    def set_waiting(self, waiting: bool) -> None:
        """Show that the script is blocked reading its stdin (and give it the keyboard), or
        that it is not any more."""
        self.waiting.setVisible(waiting)
        self.input.setPlaceholderText(WAITING_PLACEHOLDER if waiting else INPUT_PLACEHOLDER)
        self.input.setStyleSheet(
            f"QLineEdit {{ border: 2px solid {INPUT_COLOR}; }}" if waiting else ""
        )
        if waiting and self.input.isEnabled():
            self.input.setFocus()

    def _send_line(self) -> None:
        line = self.input.text()
        self.input.clear()
        self._echo(line + "\n")
        self.inputEntered.emit(line + "\n")

    def _echo(self, text: str) -> None:
        """Show a line sent to the script where a terminal would: after the output so far (a
        prompt's line included), in the input's own colour. The view's alone: the profile
        records what the script wrote, not what it was sent."""
        self.refresh()  # the prompt first, when it came since the last refresh
        cursor = QTextCursor(self.text.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text, self._input_format)
        self._tail.line_chars = 0  # the line the output was writing ends with the echo
        self._tail.cut = False
        scrollbar = self.text.verticalScrollBar()
        scrollbar.setValue(scrollbar.maximum())

    def _close_input(self) -> None:
        self.inputClosed.emit()
        self.set_input_open(False)

    def set_profile(self, profile: Profile | None) -> None:
        self._profile = profile
        self._shown = 0
        self._tail = OutputTail()
        self.text.clear()
        self.search.clear()  # a search was in the run shown before
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
        formats = {protocol.STDERR: self._stderr, NOTE: self._note}
        for text, stream in self._tail.take(profile.output[self._shown :]):
            cursor.insertText(text, formats.get(stream, self._stdout))
        self._shown = len(profile.output)
        self._trim()
        if at_bottom:
            scrollbar.setValue(scrollbar.maximum())
        if self.search.text():
            self._highlight(self.search.text())

    def _trim(self) -> None:
        """Drop the oldest lines past MAX_CHARS (MAX_LINES is the widget's own block limit)."""
        document = self.text.document()
        excess = document.characterCount() - MAX_CHARS
        if excess <= 0:
            return
        block, removed = document.begin(), 0
        while block.isValid() and removed < excess and block != document.lastBlock():
            removed += block.length()
            block = block.next()
        cursor = QTextCursor(document)
        cursor.setPosition(block.position(), QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()

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
