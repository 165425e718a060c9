"""The window's shortcuts work from every widget, the text fields included (app/shortcuts.py),
and the text fields keep the keys that type text."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QAction, QKeyEvent, QKeySequence
from PySide6.QtWidgets import QLineEdit, QVBoxLayout, QWidget
from pytestqt.qtbot import QtBot

from memsight.app.mainwindow import MainWindow
from memsight.app.shortcuts import WindowShortcuts
from tests.factories import sample_profile


class EmacsLineEdit(QLineEdit):
    """A field as Qt's X11 key scheme makes it (the offscreen platform's does not): Ctrl+E is
    its own, "end of line", so it accepts the ShortcutOverride and the window's Ctrl+E waits."""

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ShortcutOverride:
            assert isinstance(event, QKeyEvent)
            if QKeySequence(event.keyCombination()) == QKeySequence("Ctrl+E"):
                event.accept()
                self.end(False)
                return True
        return super().event(event)


@pytest.mark.parametrize("filtered", [True, False])
def test_a_field_that_claims_a_combination_gives_it_to_the_windows_action(
    qtbot: QtBot, filtered: bool
) -> None:
    window = QWidget()
    qtbot.addWidget(window)
    field = EmacsLineEdit()
    QVBoxLayout(window).addWidget(field)
    export = QAction("Export", window)
    export.setShortcut(QKeySequence("Ctrl+E"))
    window.addAction(export)
    triggered: list[bool] = []
    export.triggered.connect(lambda: triggered.append(True))
    if filtered:
        WindowShortcuts(window, [export])
    window.show()
    qtbot.waitActive(window)
    field.setFocus()
    qtbot.waitUntil(field.hasFocus)
    qtbot.keyClick(field, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)  # type: ignore[no-untyped-call]
    assert triggered == ([True] if filtered else [])  # without the filter the field keeps it


def test_ctrl_e_exports_while_the_script_field_has_the_focus(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def save_dialog(*args: object, **kwargs: object) -> str:
        asked.append(str(args[1]))
        return ""

    monkeypatch.setattr("memsight.app.filedialogs.save_file_name", save_dialog)
    window._show_profile(sample_profile(), tmp_path / "run.memsight")
    qtbot.waitActive(window)
    field = window.setup_panel.script
    field.setFocus()
    qtbot.waitUntil(field.hasFocus)
    qtbot.keyClicks(field, "train.py")  # type: ignore[no-untyped-call]
    qtbot.keyClick(field, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)  # type: ignore[no-untyped-call]
    assert asked == ["Export HTML report"]
    assert field.text() == "train.py"


def test_a_plain_key_in_a_field_types_and_does_not_trigger_a_shortcut(
    qtbot: QtBot, window: MainWindow
) -> None:
    # F alone is View > Follow Latest Samples: in a field it is the letter f.
    qtbot.waitActive(window)
    field = window.setup_panel.args
    field.setFocus()
    qtbot.waitUntil(field.hasFocus)
    following = window.follow_action.isChecked()
    qtbot.keyClicks(field, "--fast")  # type: ignore[no-untyped-call]
    assert field.text() == "--fast"
    assert window.follow_action.isChecked() == following
