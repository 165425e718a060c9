"""The timeline's layout: what it shows with no run, without CUDA, and how its time axis
reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtWidgets import QWidget
from pytestqt.qtbot import QtBot

from memsight.app.axes import ByteAxis, SecondsAxis, time_label
from memsight.app.mainwindow import MainWindow
from memsight.app.timeline import TimelineView
from tests.factories import GiB, MiB, profile, ram, table


def test_with_no_run_it_says_what_to_do_and_has_no_gpu_plot(qtbot: QtBot) -> None:
    view = TimelineView()
    qtbot.addWidget(view)
    assert view.empty.isVisible()
    assert view.empty.textItem.toPlainText() == "Open a script or drop it here, then Run"
    assert not view.gpu_shown
    assert view.gpu_plot.scene() is None  # out of the layout, not just hidden


def test_a_run_without_cuda_gives_the_ram_plot_the_room(qtbot: QtBot) -> None:
    view = TimelineView()
    qtbot.addWidget(view)
    view.resize(900, 600)
    view.set_profile(profile(ram(5.0, 100 * MiB)))
    assert not view.empty.isVisible() and not view.gpu_shown
    # The byte axis follows the run's curves again, not the message's 0 to 1
    box = view.ram_plot.getViewBox()
    assert box.autoRangeEnabled()[1]
    box.updateAutoRange()
    low, high = box.viewRange()[1]
    assert low <= 100 * MiB <= high
    view.show()
    qtbot.waitExposed(view)
    assert view.ram_plot.height() > 0.6 * view.graphics.height()


def test_the_gpu_plot_comes_with_cuda(qtbot: QtBot) -> None:
    view = TimelineView()
    qtbot.addWidget(view)
    t = np.arange(0, 5.0, 0.1)
    gpu = table("gpu", t, device=0, allocated=GiB, allocated_peak=GiB, reserved=GiB)
    view.set_profile(profile(ram(5.0, 100 * MiB), gpu))
    assert view.gpu_shown and view.gpu_plot.scene() is view.graphics.scene()
    view.set_profile(profile(ram(5.0, 100 * MiB)))  # and goes with the next run without it
    assert not view.gpu_shown


def test_byte_ticks_are_labelled_with_the_value_they_stand_at(qtbot: QtBot) -> None:
    axis = ByteAxis("left")
    quarters = [0.25 * GiB * i for i in range(1, 8)]
    assert axis.tickStrings(quarters, 1, 0.25 * GiB) == [
        "0.25 GiB", "0.50 GiB", "0.75 GiB", "1.00 GiB", "1.25 GiB", "1.50 GiB", "1.75 GiB",
    ]  # fmt: skip
    assert axis.tickStrings([2.5 * MiB, 5 * MiB, 7.5 * MiB], 1, 2.5 * MiB) == [
        "2.5 MiB", "5.0 MiB", "7.5 MiB",
    ]  # fmt: skip
    hundreds = axis.tickStrings([0, 200 * MiB, 400 * MiB], 1, 200 * MiB)
    assert hundreds == ["0 MiB", "200 MiB", "400 MiB"]
    assert axis.tickStrings([0.5 * GiB, GiB], 1, 0.5 * GiB) == ["0.5 GiB", "1.0 GiB"]


def test_one_time_format_per_view(qtbot: QtBot) -> None:
    axis = SecondsAxis("bottom")
    axis.setRange(0, 200)  # minutes: major ticks every 100 s, minor every 50 s
    assert axis.tickStrings([100, 200], 1, 100) == ["1:40", "3:20"]
    assert axis.tickStrings([50, 150], 1, 50) == ["0:50", "2:30"]
    axis.setRange(0, 90)
    assert axis.tickStrings([30, 60], 1, 30) == ["30 s", "60 s"]
    assert axis.tickStrings([0.5], 1, 0.5) == ["0.5 s"]
    # A run under a second: seconds, with no "(x0.001)" beside the label.
    axis.setLabel("time since start")
    axis.setRange(0, 0.8)
    assert axis.labelString().split(">")[1].split("<")[0].strip() == "time since start"
    assert axis.tickStrings([0.2, 0.4], 1, 0.2) == ["0.2 s", "0.4 s"]
    # A few milliseconds (a truncated profile): every tick its own label.
    axis.setRange(0, 0.002)
    ticks = axis.tickStrings([0.0005, 0.001, 0.0015], 1, 0.0005)
    assert ticks == ["0.0005 s", "0.0010 s", "0.0015 s"]


def test_a_day_long_run_is_labelled_in_hours_on_whole_clock_steps(qtbot: QtBot) -> None:
    axis = SecondsAxis("bottom")
    axis.setRange(0, 86400)
    [(step, _)] = axis.tickSpacing(0, 86400, 1400)
    assert step in (3600, 7200, 10800)  # whole hours, about one label per 90 pixels
    assert axis.tickStrings([0, 7200, 80000], 1, 7200) == ["0:00:00", "2:00:00", "22:13:20"]
    # Zoomed in near the end of the day: still hours, on whole minutes.
    axis.setRange(80000, 80600)
    [(step, _)] = axis.tickSpacing(80000, 80600, 1400)
    assert step % 60 == 0 or step in (1, 2, 5, 10, 15, 30)
    assert axis.tickStrings([80100], 1, step) == ["22:15:00"]
    # Under an hour, minutes as before; a view under two minutes, seconds.
    axis.setRange(0, 1800)
    assert axis.tickStrings([600], 1, 300) == ["10:00"]
    axis.setRange(7000, 7060)
    assert axis.tickStrings([7030], 1, 10) == ["1:57:10"]
    axis.setRange(7000, 7002)
    assert axis.tickStrings([7000.5], 1, 0.5) == ["1:56:40.5"]
    # The pointer's readout words a time as the axis does, to the millisecond.
    assert [time_label(t) for t in (1.25, 130.5, 49099.353)] == [
        "1.250 s",
        "2:10.500",
        "13:38:19.353",
    ]


def test_ctrl_o_opens_a_script_into_the_run_bar(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    monkeypatch.setattr("memsight.app.filedialogs.open_file_name", lambda *a, **k: str(script))
    window.open_action.trigger()
    assert window.setup_panel.script.text() == str(script)
    assert window.error_box is None  # not "not a memsight profile"


@pytest.mark.slow  # over 2 s on a quiet 2-core machine
def test_a_live_run_is_titled_by_its_script_and_shown_whole_when_it_ends(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    from tests.gui.support import wait_until_settled

    script = tmp_path / "train.py"
    script.write_text("import time\ntime.sleep(1.5)\n")
    window.open_script(str(script))
    window.start_run()
    assert window.windowTitle() == "memsight — train.py"
    wait_until_settled(qtbot, window)
    assert window.profile is not None
    low, high = window.timeline.lane.getViewBox().viewRange()[0]
    assert low <= 0.05 and high >= window.profile.duration * 0.99


def test_typing_a_script_path_sets_its_folder_and_the_dialog_starts_there(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    script = folder / "train.py"
    script.write_text("print('hi')\n")
    window.setup_panel.script.setText(str(script))
    window.setup_panel.script.editingFinished.emit()
    assert window.setup_panel.cwd.text() == str(folder)
    started_in: list[str] = []

    def dialog(parent: QWidget | None, title: str, start: str, filters: str) -> str:
        started_in.append(start)
        return ""

    monkeypatch.setattr("memsight.app.filedialogs.open_file_name", dialog)
    window.open_script_action.trigger()
    assert started_in == [str(folder)]


def test_nothing_of_the_run_before_stays_when_another_is_shown(
    window: MainWindow, tmp_path: Path
) -> None:
    window._show_profile(profile(ram(5.0, 100 * MiB)), tmp_path / "a.memsight")
    window.timeline.readout.setText("2.00 s: RAM 100 MiB")
    window.timeline.crosshairs[0].show()
    window.console.search.setText("loss")
    window._show_profile(profile(ram(5.0, 200 * MiB)), tmp_path / "b.memsight")
    assert window.timeline.readout.text().strip() == ""
    assert not any(line.isVisible() for line in window.timeline.crosshairs)
    assert window.console.search.text() == ""


def test_hovering_never_resizes_the_docks(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    window.resize(1280, 800)
    window.show()
    qtbot.waitExposed(window)
    window._show_profile(profile(ram(5.0, 100 * MiB)), tmp_path / "a.memsight")
    qtbot.wait(50)
    before = window.findings_dock.width(), window.width()
    long = "12.345 s   RAM: main process 1.23 GiB, peak 1.25 GiB, workers 0 B, tree 1.25 GiB" * 3
    window.timeline.readout.setText(long)  # what a hover over a busy plot writes
    qtbot.wait(50)
    assert (window.findings_dock.width(), window.width()) == before


def test_a_script_that_reads_stdin_gets_the_lines_typed_under_the_console(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    from tests.gui.support import wait_until_settled

    script = tmp_path / "ask.py"
    script.write_text(
        "import sys\nname = input('name? ')\nprint('hello', name, flush=True)\n"
        "print('rest:', repr(sys.stdin.read()), flush=True)\n"
    )
    window.open_script(str(script))
    qtbot.waitActive(window)
    window.start_run()
    live = window.profile
    assert live is not None
    # The input line takes the keyboard while the script runs, as its terminal would.
    assert window.console.input.isEnabled()
    qtbot.waitUntil(window.console.input.hasFocus)
    qtbot.waitUntil(lambda: "name?" in live.output_text(), timeout=30_000)
    window.console.input.setText("Ada")
    window.console.input.returnPressed.emit()
    qtbot.waitUntil(lambda: "hello Ada" in live.output_text(), timeout=30_000)
    # What was typed shows after the prompt, as in a terminal (the profile keeps the output).
    window.console.refresh()
    assert "name? Ada\nhello Ada\n" in window.console.text.toPlainText()
    assert "Ada\n" not in live.output_text().replace("hello Ada\n", "")
    window.console.input.setText("more")
    window.console.input.returnPressed.emit()
    window.console._close_input()  # Ctrl+D: end of file
    wait_until_settled(qtbot, window)
    assert window.profile is not None
    assert "rest: 'more\\n'" in window.profile.output_text()
    assert window.profile.info.exit_code == 0
    assert not window.console.input.isEnabled()
