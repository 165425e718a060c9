"""The plots' legends: beside the data, never over it, at a large and a small window, for a
run and for a job of many ranks; an entry's name hides its curve as its swatch does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from memsight.app.mainwindow import MainWindow
from memsight.app.timeline import TimelineView
from memsight.profiler.profile.model import Profile
from tests.factories import GiB, MiB, job, profile, ram, table
from tests.gui.support import shown_timeline

WINDOW_SIZES = [(1600, 1000), (900, 600)]


def cuda_run() -> Profile:
    """A run whose curves reach the top of both plots, where a legend inside them would sit."""
    t = np.arange(0, 5.0, 0.01)
    gpu = table("gpu", t, device=0, allocated=GiB, allocated_peak=GiB, reserved=2 * GiB)
    return profile(ram(5.0, lambda x: (100 * MiB + x * 100 * MiB).astype(np.int64)), gpu)


def many_ranks() -> Profile:
    t = np.arange(0, 5.0, 0.01)
    ranks = [
        profile(ram(5.0, (300 + 10 * r) * MiB), table("gpu", t, device=r, allocated=GiB))
        for r in range(8)
    ]
    return job(*ranks)


def settle(widget: MainWindow | TimelineView) -> None:
    """Until the layouts stop moving: a legend that wraps changes its plot's height once."""
    view = widget.timeline if isinstance(widget, MainWindow) else widget
    last = None
    for _ in range(20):
        QApplication.processEvents()
        now = [p.getViewBox().sceneBoundingRect() for p in (view.ram_plot, view.gpu_plot)]
        now += [p.legend.sceneBoundingRect() for p in (view.ram_plot, view.gpu_plot)]
        if now == last:
            return
        last = now


@pytest.mark.parametrize("size", WINDOW_SIZES)
@pytest.mark.parametrize("run", [cuda_run, many_ranks])
def test_a_legend_never_covers_its_plots_data(
    qtbot: QtBot,
    window: MainWindow,
    tmp_path: Path,
    size: tuple[int, int],
    run: Callable[[], Profile],
) -> None:
    window.resize(*size)
    qtbot.waitExposed(window)
    window._show_profile(run(), tmp_path / "run.memsight")
    settle(window)
    timeline = window.timeline
    for plot in (timeline.ram_plot, timeline.gpu_plot):
        legend, data = plot.legend.sceneBoundingRect(), plot.getViewBox().sceneBoundingRect()
        assert plot.legend.items and legend.height() > 0
        assert not legend.intersects(data), (legend, data)
        assert data.height() > 40  # and the plot keeps room for its curves
        # Every entry is inside its legend: none is laid out over the data instead.
        for sample, label in plot.legend.items:
            for part in (sample, label):
                assert not part.sceneBoundingRect().intersects(data), label.text


def test_clicking_an_entrys_name_hides_its_curve_and_greys_the_name(qtbot: QtBot) -> None:
    view = shown_timeline(qtbot, cuda_run(), 1000, 600)
    settle(view)
    sample, label = next(
        (s, lb) for s, lb in view.ram_plot.legend.items if lb.text == "Main process (RSS)"
    )
    shown_color = QColor(label.opts["color"])
    at = view.graphics.mapFromScene(label.mapToScene(label.boundingRect().center()))

    qtbot.mouseClick(view.graphics.viewport(), Qt.MouseButton.LeftButton, pos=at)  # type: ignore[no-untyped-call]
    assert not sample.item.isVisible()
    assert QColor(label.opts["color"]) != shown_color  # greyed: it reads as hidden
    qtbot.mouseClick(view.graphics.viewport(), Qt.MouseButton.LeftButton, pos=at)  # type: ignore[no-untyped-call]
    assert sample.item.isVisible() and QColor(label.opts["color"]) == shown_color


def test_a_curve_hidden_in_one_run_is_shown_in_the_next(qtbot: QtBot) -> None:
    view = shown_timeline(qtbot, cuda_run(), 1000, 600)
    settle(view)
    sample, label = next(
        (s, lb) for s, lb in view.ram_plot.legend.items if lb.text == "Main process (RSS)"
    )
    shown_color = QColor(label.opts["color"])
    at = view.graphics.mapFromScene(label.mapToScene(label.boundingRect().center()))
    qtbot.mouseClick(view.graphics.viewport(), Qt.MouseButton.LeftButton, pos=at)  # type: ignore[no-untyped-call]
    assert not sample.item.isVisible()
    view.set_profile(cuda_run())  # another profile opened
    settle(view)
    sample, label = next(
        (s, lb) for s, lb in view.ram_plot.legend.items if lb.text == "Main process (RSS)"
    )
    assert sample.item.isVisible() and QColor(label.opts["color"]) == shown_color


def test_legend_text_follows_a_dark_palette(qtbot: QtBot) -> None:
    view = TimelineView()
    qtbot.addWidget(view)
    view.set_profile(cuda_run())
    dark = QPalette()
    dark.setColor(QPalette.ColorRole.Base, QColor("#202020"))
    dark.setColor(QPalette.ColorRole.Text, QColor("#e0e0e0"))
    view.apply_palette(dark)
    for plot in (view.ram_plot, view.gpu_plot):
        colors = {QColor(label.opts["color"]).name() for _sample, label in plot.legend.items}
        assert colors == {"#e0e0e0"}
    sample, label = view.ram_plot.legend.items[0]
    sample.item.hide()
    view.apply_palette(dark)  # a hidden entry stays greyed, and readable on the dark base
    hidden = QColor(label.opts["color"])
    assert hidden.name() != "#e0e0e0" and hidden.lightness() > QColor("#202020").lightness()
