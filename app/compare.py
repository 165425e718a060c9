"""The Compare panel: the shown run against another (File > Compare With..., or the run before
it), with the numbers `memsight compare` prints, from the same functions."""

from __future__ import annotations

from html import escape

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QTextBrowser, QVBoxLayout, QWidget

from profiler.compare_command import change_text, changes, value_text
from profiler.comparison import (
    SIGNIFICANT_BYTES,
    SIGNIFICANT_SHARE,
    Comparison,
)
from profiler.diagnosis import Finding
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
