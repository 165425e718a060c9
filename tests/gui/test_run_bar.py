"""The run bar across the top of the window: script, arguments, Run and Stop on one line, the
other settings under More, and the problems that keep a run from starting."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from memsight.app.mainwindow import MainWindow
from tests.gui.support import RUN_TIMEOUT_MS
from tests.support import write_script


def test_the_run_bar_is_one_line_and_the_other_settings_wait_under_more(
    qtbot: QtBot, window: MainWindow
) -> None:
    qtbot.waitExposed(window)
    panel = window.setup_panel
    line = (panel.script, panel.browse_button, panel.args, panel.run_button, panel.stop_button)
    assert all(widget.isVisible() for widget in (*line, panel.more_button))
    tops = {widget.mapTo(window, widget.rect().center()).y() for widget in line}
    assert max(tops) - min(tops) <= 2, "script, arguments, Run and Stop share one line"
    hidden = (panel.cwd, panel.python, panel.env, panel.interval, panel.ram_budget, panel.hooks)
    assert not any(widget.isVisible() for widget in hidden)
    assert panel.more_button.text() == "More"

    panel.more_button.click()
    assert all(widget.isVisible() for widget in hidden)
    assert window.more_action.isChecked()  # the Run and View menus say the panel is open
    window.more_action.trigger()
    assert not panel.more.isVisible() and not panel.more_button.isChecked()


def test_the_more_button_counts_the_settings_changed_from_their_defaults(
    window: MainWindow, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "train.py", "pass\n")
    window.open_script(str(script))
    panel = window.setup_panel
    assert panel.more_button.text() == "More"  # the script's folder is the default
    panel.env.setPlainText("SEED=3")
    panel.ram_budget.setText("6 GiB")
    assert panel.more_button.text() == "More (2 changed)"
    assert "environment, RAM budget" in panel.more_button.toolTip()
    panel.cwd.setText(str(tmp_path.parent))
    panel.hooks.setChecked(False)
    assert panel.more_button.text() == "More (4 changed)"

    panel.defaults_button.click()
    assert panel.more_button.text() == "More"
    assert Path(panel.cwd.text()) == script.parent.resolve() and panel.hooks.isChecked()


def test_a_script_opened_with_a_remembered_setup_shows_what_it_changes(
    qtbot: QtBot, window: MainWindow, store: QSettings, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "r.py", "pass\n")
    window.open_script(str(script))
    window.setup_panel.interval.setValue(2.0)
    window.setup_panel.env.setPlainText("SEED=3")
    window.settings.setups[str(script.resolve())] = window.setup_panel.setup()
    window.settings.save(window.store)

    later = MainWindow(store)
    qtbot.addWidget(later)
    later.open_script(str(script))
    assert later.setup_panel.more_button.text() == "More (2 changed)"
    assert not later.setup_panel.more.isVisible()


def test_a_problem_in_a_field_under_more_opens_more_and_outlines_the_field(
    window: MainWindow, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "t.py", "pass\n")
    window.open_script(str(script))
    panel = window.setup_panel
    panel.env.setPlainText("NOT A PAIR")
    assert panel.more.isHidden()
    window.start_run()
    assert window.session.controller is None
    assert panel.more.isVisible() and panel.problems.isVisible()
    assert panel.problems.text() == "Environment line 1 is not KEY=VALUE."
    assert "border" in panel.env.styleSheet() and panel.script.styleSheet() == ""

    panel.env.setPlainText("SEED=1")  # fixed: the problem and the outline go
    assert panel.problems.isHidden() and panel.env.styleSheet() == ""


def test_a_problem_with_the_script_leaves_more_closed(window: MainWindow, tmp_path: Path) -> None:
    window.open_script(str(tmp_path / "missing.py"))
    window.start_run()
    panel = window.setup_panel
    assert window.session.controller is None
    assert "does not exist" in panel.problems.text() and panel.problems.isVisible()
    assert "border" in panel.script.styleSheet()
    assert panel.more.isHidden()


def test_a_long_problem_wraps_in_full_under_the_run_bar(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    window.resize(900, 600)
    qtbot.waitExposed(window)
    deep = tmp_path / ("a-folder-with-a-long-name-" * 4) / "and-deeper" / "missing.py"
    window.open_script(str(deep))
    window.start_run()
    label = window.setup_panel.problems
    lines = label.heightForWidth(label.width()) // label.fontMetrics().lineSpacing()
    assert lines >= 2, "the message is longer than the bar is wide"
    qtbot.waitUntil(lambda: label.height() >= label.heightForWidth(label.width()))  # all of it
    assert window.width() == 900  # and does not widen the window


def test_ctrl_r_runs_and_closes_more_and_ctrl_period_stops(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "wait.py", "import time\ntime.sleep(30)\n")
    window.open_script(str(script))
    window.setup_panel.more_button.click()  # to look at the settings before running
    window.activateWindow()
    qtbot.waitActive(window)
    qtbot.keyClick(window, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)  # type: ignore[no-untyped-call]
    assert window.session.running and window.setup_panel.stop_button.isEnabled()
    assert window.setup_panel.more.isHidden()  # the run has started: the room is the timeline's
    qtbot.keyClick(window, Qt.Key.Key_Period, Qt.KeyboardModifier.ControlModifier)  # type: ignore[no-untyped-call]
    assert window.session.stopping
    qtbot.waitUntil(lambda: not window.session.timer.isActive(), timeout=RUN_TIMEOUT_MS)
    assert window.setup_panel.run_button.isEnabled()
    QApplication.processEvents()


def test_browse_beside_the_script_opens_the_script_chosen(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = write_script(tmp_path / "project", "train.py", "pass\n")
    monkeypatch.setattr(
        "memsight.app.filedialogs.open_file_name", lambda *args, **kwargs: str(script)
    )
    window.setup_panel.browse_button.click()
    assert window.setup_panel.script.text() == str(script)
    assert window.setup_panel.cwd.text() == str(script.parent)
    assert window.windowTitle() == "memsight — train.py"


def test_a_script_typed_and_run_at_once_runs_in_its_own_folder(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Type a new path and press Ctrl+R without Enter: the working dir, which was the old
    # script's folder (its default), follows the field, and no folder is stored for the script.
    first = write_script(tmp_path / "first", "train.py", "pass\n")
    second = write_script(tmp_path / "second", "train.py", "pass\n")
    window.open_script(str(first))
    panel = window.setup_panel
    started: list[str] = []
    monkeypatch.setattr(window.session, "start", lambda spec, out: started.append(spec.cwd))
    panel.script.setText(str(second))
    window.run_action.trigger()
    assert started == [str(second.parent)]
    assert window.settings.setups[str(second.resolve())].cwd == ""
    assert panel.more_button.text() == "More"

    # A folder the user chose stays, and the More button says it differs from the default.
    panel.cwd.setText(str(tmp_path))
    panel.script.setText(str(first))
    window.run_action.trigger()
    assert started[-1] == str(tmp_path)
    assert window.settings.setups[str(first.resolve())].cwd == str(tmp_path)
    assert panel.more_button.text() == "More (1 changed)"
