"""File → Export HTML Report (Ctrl+E) writes the report of what the window shows."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtGui import QKeySequence
from pytestqt.qtbot import QtBot

from memsight.app.mainwindow import MainWindow
from memsight.profiler.report import render_html
from tests.gui.support import NO_ZERO_GRAD, run_to_end
from tests.support import write_script


@pytest.mark.slow  # a PyTorch run
def test_export_writes_the_report_of_the_run_shown(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    assert not window.export_action.isEnabled()  # nothing to export yet
    assert window.export_action.shortcut() == QKeySequence("Ctrl+E")
    run_to_end(qtbot, window, write_script(tmp_path, "nozero.py", NO_ZERO_GRAD))
    assert window.export_action.isEnabled()
    out = tmp_path / "report.html"
    assert window.export_html_to(str(out))
    text = out.read_text(encoding="utf-8")
    assert "nozero.py" in text and "missing-zero-grad" in text
    assert window.profile is not None and window.profile_path is not None
    # Exported straight after the live run: named by the file it was recorded into.
    assert f"profile <code>{window.profile_path.name}</code>" in text
    assert text == render_html(window.profile)  # the same report as memsight report --html
    assert "Exported" in window.statusBar().currentMessage()


def test_export_to_an_unwritable_place_says_why(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    run_to_end(qtbot, window, write_script(tmp_path, "ok.py", "print('ok')\n"))
    assert not window.export_html_to(str(tmp_path / "missing" / "report.html"))
    assert window.error_box is not None
    assert "Cannot export the report" in window.error_box.windowTitle()
