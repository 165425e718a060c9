"""The event lane and the lines it draws across the plots: the labels of a run's last moments
(an OOM, an uncaught error and the exit, milliseconds apart) all readable, at any window size
and zoom, and a mark's tooltip saying what happened once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QGraphicsSimpleTextItem, QGraphicsTextItem
from pytestqt.qtbot import QtBot

from memsight.app.eventlane import CENSUS_COLOR
from memsight.app.mainwindow import MainWindow
from memsight.app.timeline import TimelineView
from memsight.profiler.profile.model import Event, Profile
from tests.factories import MiB, job, oom_event, profile, ram
from tests.gui.support import shown_timeline

END = 5.0


def out_of_memory_run() -> Profile:
    """A run that ends as a recorded OOM does: the OOM seen in the forward, then seen again
    uncaught at the top level (one exception, one id), an error while handling it, and the
    exit, a few milliseconds apart."""
    oom = oom_event("cpu", t=END - 0.012)
    oom.data.update(exc_id=1, uncaught=False, where="forward")
    again = Event(END - 0.011, "exception", {**oom.data, "uncaught": True, "where": "uncaught"})
    error = Event(
        END - 0.008,
        "exception",
        {"exc_id": 2, "exc_type": "builtins.ValueError", "uncaught": True, "oom": None},
    )
    exit_event = Event(END - 0.004, "exit", {"exit_code": 1, "signal": None})
    growing = ram(END, lambda t: (200 * MiB + t * 120 * MiB).astype(np.int64))
    return profile(growing, events=[oom, again, error, exit_event], exit_code=1)


def drawn_labels(view: TimelineView) -> list[tuple[str, QRectF]]:
    """Each text drawn over the RAM plot's data, with where it is on the screen."""
    box = view.ram_plot.getViewBox()
    area = box.sceneBoundingRect()
    labels = []
    for item in box.scene().items():
        if not isinstance(item, (QGraphicsTextItem, QGraphicsSimpleTextItem)):
            continue
        if not item.isVisible() or not box.isAncestorOf(item):
            continue
        text = item.toPlainText() if isinstance(item, QGraphicsTextItem) else item.text()
        rect = item.sceneBoundingRect()
        if text.strip() and rect.intersects(area):
            labels.append((text, rect))
    return labels


def settle(view: TimelineView) -> None:
    last = None
    for _ in range(20):
        QApplication.processEvents()
        now = [r for _text, r in drawn_labels(view)]
        now.append(view.ram_plot.getViewBox().sceneBoundingRect())
        if now == last:
            return
        last = now


def assert_readable(view: TimelineView) -> list[str]:
    """No label cut by the plot's edges, none over another; the texts shown."""
    area = view.ram_plot.getViewBox().sceneBoundingRect()
    labels = drawn_labels(view)
    for text, rect in labels:
        assert area.contains(rect), f"{text!r} is cut: {rect} outside {area}"
    for i, (text, rect) in enumerate(labels):
        for other, other_rect in labels[i + 1 :]:
            assert not rect.intersects(other_rect), f"{text!r} overlaps {other!r}"
    return [text for text, _rect in labels]


def shown_out_of_memory_run(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, size: tuple[int, int]
) -> tuple[TimelineView, Profile]:
    """The window at `size` showing out_of_memory_run(), its labels laid out."""
    window.resize(*size)
    qtbot.waitExposed(window)
    run = out_of_memory_run()
    window._show_profile(run, tmp_path / "oom.memsight")
    settle(window.timeline)
    return window.timeline, run


def labels_above_the_peak(view: TimelineView, run: Profile) -> list[tuple[str, QRectF]]:
    """The labels drawn over the RAM plot, each checked to sit above the run's peak, which is
    at its end, where its labels are: in their band above the curve, never on it."""
    box = view.ram_plot.getViewBox()
    assert run.ram is not None
    peak = float(run.ram["rss_peak"].max())
    peak_y = box.mapViewToScene(pg.Point(END, peak)).y()  # screen y grows downwards
    labels = drawn_labels(view)
    for text, rect in labels:
        assert rect.bottom() <= peak_y, f"{text!r} covers the curve: {rect} under y={peak_y}"
    return labels


@pytest.mark.parametrize("size", [(1600, 1000), (900, 600)])
def test_the_labels_of_a_runs_last_moments_never_overlap_or_get_cut(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, size: tuple[int, int]
) -> None:
    view, _run = shown_out_of_memory_run(qtbot, window, tmp_path, size)
    shown = " ".join(assert_readable(view))
    for text in ("OOM: RuntimeError", "error: ValueError", "exit: exit code 1"):
        assert text in shown  # each said, on its own or with its neighbours
    assert shown.count("OOM: RuntimeError") == 1  # one exception seen twice: one label

    for low, high in [(4.0, END), (END - 0.05, END + 0.01), (END - 0.0125, END - 0.0035)]:
        view.lane.setXRange(low, high, padding=0)
        settle(view)
        shown = " ".join(assert_readable(view))
        for text in ("OOM: RuntimeError", "error: ValueError", "exit: exit code 1"):
            assert text in shown, (low, high, shown)


@pytest.mark.parametrize("size", [(1600, 1000), (900, 600)])
def test_the_labels_of_errors_and_the_exit_never_cover_the_curve_at_its_peak(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, size: tuple[int, int]
) -> None:
    # The run peaks as it ends, where its OOM, error and exit labels are: they sit in a band
    # of their own above the curve (the plot's automatic range leaves it free), never on it.
    view, run = shown_out_of_memory_run(qtbot, window, tmp_path, size)
    assert labels_above_the_peak(view, run)


def test_a_census_mark_and_the_errors_labels_keep_apart(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    window.resize(900, 600)
    qtbot.waitExposed(window)
    window._show_profile(out_of_memory_run(), tmp_path / "oom.memsight")
    view = window.timeline
    view.mark_times([(END - 0.012, "census at the error"), (END - 0.5, "census at step 40")])
    settle(view)
    shown = " ".join(assert_readable(view))
    assert "census at the error" in shown and "census at step 40" in shown


def test_a_census_label_keeps_off_the_curves_and_its_line_stops_at_other_labels(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    # At 900 px a census late in the run has its line under the exit's label and its own
    # label beside the curves' highest part: the label goes in the band above the curves,
    # and the line is hidden behind the exit's label, not drawn through its text.
    view, run = shown_out_of_memory_run(qtbot, window, tmp_path, (900, 600))
    box = view.ram_plot.getViewBox()
    exit_rect = next(rect for text, rect in drawn_labels(view) if "exit" in text)
    under_exit = box.mapSceneToView(exit_rect.center()).x()
    view.mark_times([(under_exit, "census at optimizer step 40")])
    settle(view)
    labels = labels_above_the_peak(view, run)
    assert any(text.startswith("census at") for text, _rect in labels), labels
    exit_rect = next(rect for text, rect in labels if "exit" in text)
    shot = view.graphics.grab().toImage()
    corner = view.graphics.mapFromScene(exit_rect.topLeft())
    # The label's text is grey on the plot's white; the census purple, however faint (a line
    # seen through a translucent veil), is told apart by its hue.
    crossing = [
        (x, y)
        for x in range(corner.x() + 1, corner.x() + int(exit_rect.width()) - 1)
        for y in range(corner.y() + 1, corner.y() + int(exit_rect.height()) - 1)
        if _census_hue(shot.pixelColor(x, y))
    ]
    assert crossing == [], f"the census line shows through the exit's label at {crossing[:3]}"


def _census_hue(color: QColor) -> bool:
    """A pixel of CENSUS_COLOR (purple) or of it blended with white or grey."""
    census = QColor(CENSUS_COLOR)
    assert census.blue() > census.red() > census.green()
    return color.blue() - color.green() > 12 and color.red() - color.green() > 6


def test_labels_off_the_view_are_not_drawn(qtbot: QtBot) -> None:
    view = shown_timeline(qtbot, out_of_memory_run(), 900, 500)
    view.lane.setXRange(1.0, 2.0, padding=0)
    settle(view)
    assert drawn_labels(view) == []


def test_the_oom_marks_tooltip_says_what_happened_once(qtbot: QtBot) -> None:
    view = shown_timeline(
        qtbot, out_of_memory_run(), 900, 500
    )  # the whole run: its two sightings under one mark
    QApplication.processEvents()
    oom = next(spot for spot in view.marks.points() if str(spot.data()).startswith("OOM"))
    box = view.lane.getViewBox()
    at = view.graphics.mapFromScene(box.mapViewToScene(oom.pos()))
    qtbot.mouseMove(view.graphics.viewport(), at)  # type: ignore[no-untyped-call]
    qtbot.waitUntil(lambda: bool(box.toolTip()))
    tip = box.toolTip()  # every mark under the pointer: at this zoom, the run's last moments
    assert tip.count("OOM: RuntimeError") == 1, tip
    assert f"OOM: RuntimeError\nat {END - 0.012:.3f} s" in tip
    assert "error: ValueError" in tip and "exit: exit code 1" in tip and "others" not in tip


def test_a_ranks_exception_seen_twice_is_one_mark(qtbot: QtBot) -> None:
    view = TimelineView()
    qtbot.addWidget(view)
    view.set_profile(job(out_of_memory_run()))
    marks = [str(spot.data()) for spot in view.marks.points()]
    assert marks.count("rank 0: OOM: RuntimeError") == 1, marks
    assert "rank 0: error: ValueError" in marks


def test_labels_with_no_room_apart_are_joined_into_one(qtbot: QtBot) -> None:
    """Six ranks running out of memory at once, on a plot three labels high: no label over
    another, and those that found no row of their own are read in their neighbour's."""
    ranks = []
    for rank in range(6):
        oom = oom_event("gpu", t=END - 0.01 + rank * 0.001)
        ranks.append(profile(ram(END, 300 * MiB), events=[oom]))
    view = shown_timeline(qtbot, job(*ranks), 700, 200)
    settle(view)
    shown = assert_readable(view)
    assert any(" · " in text for text in shown), shown
    assert "rank 0: OOM" in " ".join(shown)


def test_labels_stay_readable_on_a_dark_palette(qtbot: QtBot) -> None:
    view = shown_timeline(qtbot, out_of_memory_run(), 900, 500)
    dark = QPalette()
    dark.setColor(QPalette.ColorRole.Base, QColor("#1e1e1e"))
    dark.setColor(QPalette.ColorRole.Text, QColor("#dddddd"))
    view.apply_palette(dark)
    settle(view)
    box = view.ram_plot.getViewBox()
    labels = {
        item.text(): item.brush().color()
        for item in box.scene().items()
        if isinstance(item, QGraphicsSimpleTextItem) and item.isVisible() and box.isAncestorOf(item)
    }
    assert "exit: exit code 1" in labels  # the exit's dark grey, lightened
    for text, color in labels.items():
        assert color.lightness() - QColor("#1e1e1e").lightness() >= 100, text
