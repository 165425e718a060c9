"""How the window shares its room: the timeline in the middle with most of it, at every size,
and a window that fits half of a 1920-pixel screen and stays the size it was given."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, QSettings, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from memsight.app.mainwindow import MainWindow
from memsight.profiler.profile.model import Profile
from tests.factories import GiB, MiB, profile, ram, table
from tests.gui.support import NO_ZERO_GRAD, run_to_end
from tests.support import write_script

HALF_A_FULL_HD_SCREEN = 960  # px: a window tiled to one side of a 1920-pixel screen
# A plot this tall still shows the shape of a curve and three labelled ticks on its byte axis
# (a tick label is some 17 px high); the RAM plot alone has this much more at 900x600.
PLOT_MIN = 100
RAM_PLOT_ALONE_MIN = 150


def _gpu_profile() -> Profile:
    t = np.arange(0, 5.0, 0.1)
    gpu = table("gpu", t, device=0, allocated=GiB, allocated_peak=GiB, reserved=GiB)
    return profile(ram(5.0, 100 * MiB), gpu, devices=[(0, 16 * GiB)])


def _drag(window: MainWindow, start: QPoint, end: QPoint) -> None:
    """The left button pressed at `start`, moved to `end` in steps, released there."""

    def send(kind: QEvent.Type, at: QPoint, button: Qt.MouseButton, held: Qt.MouseButton) -> None:
        event = QMouseEvent(
            kind,
            QPointF(at),
            window.mapToGlobal(QPointF(at)),
            button,
            held,
            Qt.KeyboardModifier.NoModifier,
        )
        QApplication.sendEvent(window, event)

    left, none = Qt.MouseButton.LeftButton, Qt.MouseButton.NoButton
    send(QEvent.Type.MouseMove, start, none, none)  # over the separator: the split cursor
    send(QEvent.Type.MouseButtonPress, start, left, left)
    for step in range(1, 11):
        send(QEvent.Type.MouseMove, start + (end - start) * step / 10, none, left)
        QApplication.processEvents()  # the layout follows the separator move by move
    send(QEvent.Type.MouseButtonRelease, end, left, none)


def _shown_at(qtbot: QtBot, store: QSettings, width: int, height: int) -> MainWindow:
    """A window as a first start shows it (no layout saved yet), at this size."""
    window = MainWindow(store)
    qtbot.addWidget(window)
    window.resize(width, height)
    window.show()
    qtbot.waitExposed(window)
    return window


def test_at_900_by_600_the_timeline_has_most_of_the_window(
    qtbot: QtBot, store: QSettings, tmp_path: Path
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
    qtbot: QtBot, store: QSettings, tmp_path: Path
) -> None:
    window = _shown_at(qtbot, store, 1600, 1000)
    window._show_profile(profile(ram(5.0, 100 * MiB)), tmp_path / "a.memsight")
    # On a large screen the user drags the findings wider, then tiles the window to half of
    # a smaller one: the findings keep their share, not their width, and the timeline keeps
    # the larger part.
    qtbot.wait(20)
    findings = window.findings_dock.geometry()
    grip = QPoint(
        (window.timeline.geometry().right() + findings.left()) // 2, findings.center().y()
    )
    _drag(window, grip, grip - QPoint(480 - findings.width(), 0))
    qtbot.waitUntil(lambda: window.findings_dock.width() == 480)
    for width, height in ((900, 600), (640, 480)):
        _resize(qtbot, window, width, height)
        assert window.timeline.width() > window.width() / 2, (width, height)
    # In the narrow window the findings need more than their share for a while (a long
    # heading during a run, say): the dock is held at that minimum, which then goes away.
    window.findings.setMinimumWidth(300)
    qtbot.waitUntil(lambda: window.findings_dock.width() >= 300)
    window.findings.setMinimumWidth(0)
    _resize(qtbot, window, 1600, 1000)
    # Back at its first size the dock has the share the user gave it, not the larger one the
    # narrow window held it at.
    assert window.findings_dock.width() == pytest.approx(480, abs=16)


def _resize(qtbot: QtBot, window: MainWindow, width: int, height: int) -> None:
    window.resize(width, height)
    qtbot.waitUntil(lambda: window.size().toTuple() == (width, height))
    qtbot.wait(20)


def test_the_window_fits_half_a_screen_whatever_the_status_bar_says(
    qtbot: QtBot, store: QSettings, tmp_path: Path
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
def test_the_window_keeps_its_width_through_runs(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
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
