"""How the window shares its room: the timeline in the middle with most of it, at every size,
and a window that fits half of a 1920-pixel screen and stays the size it was given."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QSettings, Qt

from app.mainwindow import MainWindow
from tests.factories import GiB, MiB, profile, ram, table
from tests.gui.support import NO_ZERO_GRAD, run_to_end
from tests.support import write_script

HALF_A_FULL_HD_SCREEN = 960  # px: a window tiled to one side of a 1920-pixel screen
# A plot this tall still shows the shape of a curve and three labelled ticks on its byte axis
# (a tick label is some 17 px high); the RAM plot alone has this much more at 900x600.
PLOT_MIN = 100
RAM_PLOT_ALONE_MIN = 150


def _gpu_profile() -> object:
    t = np.arange(0, 5.0, 0.1)
    gpu = table("gpu", t, device=0, allocated=GiB, allocated_peak=GiB, reserved=GiB)
    return profile(ram(5.0, 100 * MiB), gpu, devices=[(0, 16 * GiB)])


def _shown_at(qtbot, store: QSettings, width: int, height: int) -> MainWindow:  # type: ignore[no-untyped-def]
    """A window as a first start shows it (no layout saved yet), at this size."""
    window = MainWindow(store)
    qtbot.addWidget(window)
    window.resize(width, height)
    window.show()
    qtbot.waitExposed(window)
    return window


def test_at_900_by_600_the_timeline_has_most_of_the_window(
    qtbot, store: QSettings, tmp_path: Path
) -> None:
    window = _shown_at(qtbot, store, 900, 600)
    window._show_profile(profile(ram(5.0, 100 * MiB)), tmp_path / "a.memsight")
    qtbot.wait(20)
    timeline = window.timeline
    # Findings beside it take a quarter of the width: the timeline keeps more than 60 %.
    assert timeline.width() > 0.6 * window.width()
    assert timeline.ram_plot.height() >= RAM_PLOT_ALONE_MIN

    window._show_profile(_gpu_profile(), tmp_path / "b.memsight")  # two plots share the height
    qtbot.wait(20)
    assert timeline.gpu_shown
    assert timeline.ram_plot.height() >= PLOT_MIN and timeline.gpu_plot.height() >= PLOT_MIN


def test_docks_keep_their_share_when_the_window_is_resized(
    qtbot, store: QSettings, tmp_path: Path
) -> None:
    window = _shown_at(qtbot, store, 1600, 1000)
    window._show_profile(profile(ram(5.0, 100 * MiB)), tmp_path / "a.memsight")
    # On a large screen the user gives the findings more room, then tiles the window to half
    # of a smaller one: the findings keep their share, not their width, and the timeline
    # keeps the larger part.
    window.resizeDocks([window.findings_dock], [480], Qt.Orientation.Horizontal)
    qtbot.waitUntil(lambda: window.findings_dock.width() == 480)
    for width, height in ((900, 600), (640, 480), (1600, 1000)):
        window.resize(width, height)
        qtbot.waitUntil(lambda w=width: window.width() == w)
        qtbot.wait(20)
        assert window.timeline.width() > window.width() / 2, (width, height)
    # Back at its first size, after a size so narrow the dock was held at its minimum width:
    # the dock has the share it was given again, not the larger one its minimum gave it.
    assert window.findings_dock.width() == pytest.approx(480, abs=16)


def test_the_window_fits_half_a_screen_whatever_the_status_bar_says(
    qtbot, store: QSettings, tmp_path: Path
) -> None:
    window = _shown_at(qtbot, store, 900, 600)
    window._show_profile(_gpu_profile(), tmp_path / "a.memsight")
    window.status.state_label.setText("Ended: killed by signal 15 (SIGTERM), stopped from the app")
    window.status.compare_previous_button.show()
    qtbot.wait(20)
    assert window.minimumSizeHint().width() <= HALF_A_FULL_HD_SCREEN
    assert window.width() == 900
    state = window.status.state_label
    if state.shown_text() != state.text():  # squeezed: cut short with an ellipsis, not clipped
        assert state.shown_text().endswith("…")


@pytest.mark.slow  # runs a script with PyTorch twice through the window (~5 s)
def test_the_window_keeps_its_width_through_runs(qtbot, window: MainWindow, tmp_path: Path) -> None:
    window.resize(900, 600)
    qtbot.waitUntil(lambda: window.width() == 900)
    script = write_script(
        tmp_path / ("a-project-folder-with-a-long-name" * 3), "train.py", NO_ZERO_GRAD
    )
    run_to_end(qtbot, window, script, "--epochs 2 --batch-size 64 --learning-rate 0.001")
    assert window.findings.list.count() > 0  # the panels have something to show
    run_to_end(qtbot, window, script)  # a second run: the status bar offers to compare
    assert not window.status.compare_previous_button.isHidden()
    assert window.width() == 900
    assert window.minimumSizeHint().width() <= HALF_A_FULL_HD_SCREEN
