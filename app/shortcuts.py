"""The window's shortcuts from every widget in it.

A text field takes the key combinations it has a meaning for before the window's actions see
them: on Linux a QLineEdit reads Ctrl+E as "end of line", so Ctrl+E (Export HTML Report) did
nothing while the Script field had the focus, which it has after a path is typed. The filter
here lets the window's own shortcuts through such fields; the fields keep every other key,
and every key without Ctrl, Alt or Meta (a plain F types an F, it does not follow the run).
"""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QAction, QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QComboBox,
    QLineEdit,
    QPlainTextEdit,
    QTextEdit,
    QWidget,
)

# The widgets that claim key combinations for editing.
TEXT_FIELDS = (QLineEdit, QAbstractSpinBox, QComboBox, QPlainTextEdit, QTextEdit)
# A combination with one of these is a command, never text.
COMMAND_MODIFIERS = (
    Qt.KeyboardModifier.ControlModifier
    | Qt.KeyboardModifier.AltModifier
    | Qt.KeyboardModifier.MetaModifier
)


class WindowShortcuts(QObject):
    """Gives the combinations of `actions` to the actions, in every text field of `window`."""

    def __init__(self, window: QWidget, actions: Iterable[QAction]) -> None:
        super().__init__(window)
        self._actions = list(actions)
        for kind in TEXT_FIELDS:
            for field in window.findChildren(kind):
                field.installEventFilter(self)

    def is_window_shortcut(self, event: QKeyEvent) -> bool:
        if not event.modifiers() & COMMAND_MODIFIERS:
            return False
        pressed = QKeySequence(event.keyCombination())
        return any(
            action.isEnabled()
            and not action.shortcut().isEmpty()
            and action.shortcut().matches(pressed) == QKeySequence.SequenceMatch.ExactMatch
            for action in self._actions
        )

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        # A field that accepts the ShortcutOverride keeps the combination; ignored, it goes to
        # the shortcut of the window's action.
        if (
            event.type() == QEvent.Type.ShortcutOverride
            and isinstance(event, QKeyEvent)
            and self.is_window_shortcut(event)
        ):
            event.ignore()
            return True
        return super().eventFilter(watched, event)
