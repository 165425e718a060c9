"""A finished run's curves are handed each view's points by the timeline, after the linked
plots have moved: pyqtgraph's own rebuild for the new x range is skipped (plotting.CurveItem),
and what it draws is still exactly what a rebuild for the view would draw, whichever plot
the user moved."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
import pytest
from pytestqt.qtbot import QtBot

from memsight.app.mainwindow import MainWindow
from memsight.app.plotting import CurveItem
from memsight.app.timeline import TimelineView
from tests.factories import gpu_run
from tests.gui.support import run_until_its_last_tick, shown_timeline, wait_until_settled
from tests.support import write_script


@pytest.fixture
def view(qtbot: QtBot) -> TimelineView:
    return shown_timeline(qtbot, gpu_run(), 1200, 700)


def shown(item: CurveItem) -> tuple[list[float], list[float]]:
    """What the item paints: its display data, clipped to the view and thinned."""
    curve = item.curve
    return np.asarray(curve.xData).tolist(), np.asarray(curve.yData).tolist()


def rebuilt(item: CurveItem) -> tuple[list[float], list[float]]:
    """What pyqtgraph paints after rebuilding the display data for the view as it is now."""
    item._datasetDisplay = None
    pg.PlotDataItem.updateItems(item, styleUpdate=False)
    return shown(item)


MOVES: dict[str, Callable[[TimelineView], None]] = {
    "lane zoomed": lambda v: v.set_x_range(40.0, 90.0),
    "lane panned": lambda v: v.lane.getViewBox().translateBy(x=30.0),
    "RAM plot dragged": lambda v: v.ram_plot.getViewBox().translateBy(x=-55.0),
    "GPU plot zoomed": lambda v: v.gpu_plot.getViewBox().scaleBy(x=0.25),
    "whole run": lambda v: v.zoom_to_fit(),
}


@pytest.mark.parametrize("move", list(MOVES), ids=list(MOVES))
def test_a_moved_view_draws_what_a_rebuild_for_it_draws(view: TimelineView, move: str) -> None:
    view.set_x_range(150.0, 260.0)
    before = {key: shown(curve.item) for key, curve in view.curves.items()}
    MOVES[move](view)
    assert view.x_range() != (150.0, 260.0)
    drawn = {key: shown(curve.item) for key, curve in view.curves.items()}
    assert drawn != before
    for key, curve in view.curves.items():
        assert curve.item.range_driven
        assert drawn[key] == rebuilt(curve.item), key


@pytest.fixture
def rebuilds(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """How many times each curve item's display data was rebuilt, by id of the item."""
    counts: Counter[int] = Counter()
    original = pg.PlotDataItem.updateItems

    def counted(item: Any, *args: Any, **kwargs: Any) -> None:
        counts[id(item)] += 1
        original(item, *args, **kwargs)

    monkeypatch.setattr(pg.PlotDataItem, "updateItems", counted)
    return counts


def test_a_pan_rebuilds_each_curve_once(view: TimelineView, rebuilds: Counter[int]) -> None:
    view.set_x_range(100.0, 200.0)
    rebuilds.clear()
    view.lane.getViewBox().translateBy(x=20.0)
    assert {key: rebuilds[id(c.item)] for key, c in view.curves.items()} == {
        key: 1 for key in view.curves
    }


def test_a_running_run_leaves_the_rebuild_to_pyqtgraph(view: TimelineView) -> None:
    run = gpu_run()
    view.set_profile(run, running=True)
    assert not any(curve.item.range_driven for curve in view.curves.values())


def test_a_run_that_ends_is_drawn_whole_each_curve_once(
    view: TimelineView, rebuilds: Counter[int]
) -> None:
    run = gpu_run()
    view.set_profile(run, running=True)
    view.refresh()
    followed = view.x_range()
    assert followed[1] - followed[0] < run.duration  # the view follows the run's last minute
    rebuilds.clear()
    view.set_running(False, whole_run=True)
    low, high = view.x_range()
    assert low <= 0.0 and high >= run.duration
    assert {key: rebuilds[id(c.item)] for key, c in view.curves.items()} == {
        key: 1 for key in view.curves
    }
    for key, curve in view.curves.items():
        assert shown(curve.item) == rebuilt(curve.item), key


@pytest.mark.slow  # runs a script (~1 s)
def test_the_tick_that_ends_a_run_draws_its_last_samples_with_the_whole_run(
    qtbot: QtBot, window: MainWindow, rebuilds: Counter[int], tmp_path: Path
) -> None:
    script = write_script(
        tmp_path, "s.py", "import time\nb = bytearray(40 * 2**20)\ntime.sleep(1)\n"
    )
    run_until_its_last_tick(window, script)
    session, timeline = window.session, window.timeline
    refreshed: list[bool] = []
    session.refreshed.connect(lambda: refreshed.append(True))
    rebuilds.clear()
    session._tick()
    assert refreshed, "the last tick brought samples"
    assert not timeline.running
    rss, profile = timeline.curves["rss"], timeline.profile
    assert profile is not None and len(rss.points.x) > 1
    assert timeline.x_range()[1] >= profile.duration
    # Drawn once, for the whole run: not for the view that followed the run and then again.
    assert rebuilds[id(rss.item)] == 1
    assert all(rebuilds[id(curve.item)] <= 1 for curve in timeline.curves.values())
    wait_until_settled(qtbot, window)
