"""The rules a tick asks for start once the timeline's paint has returned, never beside it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import shiboken6
from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QPaintEvent
from PySide6.QtWidgets import QGraphicsView, QWidget
from pytestqt.qtbot import QtBot

from memsight.app import diagnosisworker
from memsight.app.afterpaint import AfterPaint
from memsight.app.mainwindow import MainWindow
from memsight.profiler import diagnosis
from memsight.profiler.profile.model import Profile
from tests.damaged_files import record


class PaintLog(QWidget):
    """A widget that says when each of its paints began and ended."""

    def __init__(self, heard: list[str]) -> None:
        super().__init__()
        self.heard = heard

    def paintEvent(self, event: QPaintEvent) -> None:
        self.heard.append("paint begins")
        super().paintEvent(event)
        self.heard.append("paint ends")


def shown_paint_log(qtbot: QtBot, heard: list[str]) -> PaintLog:
    """A PaintLog on screen, its first paint (on showing) done."""
    widget = PaintLog(heard)
    qtbot.addWidget(widget)
    widget.show()
    qtbot.waitExposed(widget)
    qtbot.waitUntil(lambda: "paint ends" in heard)
    return widget


def test_work_waits_for_the_paint_that_follows_a_change(qtbot: QtBot) -> None:
    heard: list[str] = []
    widget = shown_paint_log(qtbot, heard)  # the first paint, on showing
    heard.clear()
    after = AfterPaint(widget)

    widget.update()  # a tick changed what the widget shows: its paint is on the way
    after.call(lambda: heard.append("work"))
    assert after.waiting == 1 and heard == []  # never run in the call itself
    qtbot.waitUntil(lambda: "work" in heard, timeout=5_000)
    assert heard == ["paint begins", "paint ends", "work"]
    assert after.waiting == 0


def test_work_for_a_widget_off_screen_runs_in_the_next_turn_of_the_loop(qtbot: QtBot) -> None:
    heard: list[str] = []
    widget = PaintLog(heard)  # never shown: no paint will come
    qtbot.addWidget(widget)
    after = AfterPaint(widget)
    after.call(lambda: heard.append("work"))
    assert heard == []
    qtbot.waitUntil(lambda: heard == ["work"], timeout=5_000)


def test_work_runs_when_no_paint_comes(qtbot: QtBot) -> None:
    heard: list[str] = []
    widget = shown_paint_log(qtbot, heard)
    heard.clear()
    after = AfterPaint(widget)
    after.call(lambda: heard.append("work"))  # nothing changed: no paint is on the way
    qtbot.waitUntil(lambda: heard == ["work"], timeout=5_000)


def test_a_call_waiting_when_its_window_is_deleted_is_dropped(qtbot: QtBot) -> None:
    # A window closed and deleted while a tick's call still waited for the loop's next turn
    # (a test's window, a window closed at a run's end): the call went on to the deleted
    # AfterPaint's timer and raised in the event loop.
    heard: list[str] = []
    widget = PaintLog(heard)  # off screen: the call waits for the next turn of the loop
    after = AfterPaint(widget, widget)
    after.call(lambda: heard.append("work"))
    shiboken6.delete(widget)  # the window and its AfterPaint, gone before that turn
    qtbot.wait(50)  # a raise in the event loop fails the test (pytest-qt)
    assert heard == []


class PaintTimes(QObject):
    """Paints the viewport it filters itself, to note when each paint began and ended (a
    patched paintEvent is not called once PySide has looked the override up)."""

    def __init__(self, view: QGraphicsView, heard: list[tuple[str, float]]) -> None:
        super().__init__()
        self.view = view
        self.heard = heard

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is not self.view.viewport() or event.type() != QEvent.Type.Paint:
            return False
        began = time.perf_counter()
        self.view.viewportEvent(event)
        self.heard.append(("paint", began))
        self.heard.append(("paint ended", time.perf_counter()))
        return True


def test_the_rules_of_a_shown_run_start_after_the_timeline_is_painted(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    heard: list[tuple[str, float]] = []
    original_diagnose = diagnosis.diagnose

    def logged_diagnose(profile: Profile, threads: int) -> object:
        heard.append(("rules", time.perf_counter()))  # list.append: safe from any thread
        return original_diagnose(profile, threads=threads)

    monkeypatch.setattr(diagnosisworker, "diagnose", logged_diagnose)
    path = record(tmp_path / "run.memsight")
    qtbot.waitExposed(window)
    paints = PaintTimes(window.timeline.graphics, heard)
    window.timeline.graphics.viewport().installEventFilter(paints)
    asked = time.perf_counter()
    assert window.open_profile(str(path))  # the run's curves are drawn, and its rules asked for
    qtbot.waitUntil(lambda: window.findings.final, timeout=30_000)
    window.timeline.graphics.viewport().removeEventFilter(paints)
    rules = next(at for what, at in heard if what == "rules")
    first_paint_ended = next(at for what, at in heard if what == "paint ended" and at > asked)
    assert first_paint_ended < rules
