"""A long live run costs each frame what one view holds, not the whole run: while the run
goes on pyqtgraph is handed the points near the view (each block's low and high where they
are many to a pixel), a view moved back gets its points at once, and the finished run is
whole."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QPaintEvent
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from memsight.app.curvepoints import LIVE_FACTOR
from memsight.app.plotting import Curve, make_curve
from memsight.app.timeline import FOLLOW_WINDOW_S, TimelineView
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import MAIN_RSS
from tests.factories import MiB, profile, ram

RATE_HZ = 1000  # samples a second, as at --interval-ms 1
MINUTES = 10
BLOCK_S = 10.0  # what arrives between two refreshes, in seconds of the run


def _grow(live: Profile, start: float) -> None:
    """Append BLOCK_S seconds of samples, as the recorder's frames do while the run goes on."""
    block = ram(BLOCK_S, lambda t: (100 + t % 50) * MiB, interval=1 / RATE_HZ)
    rows = {name: block[name] for name in block.column_names}
    rows["t"] = rows["t"] + start
    live.tables["ram"].append(rows)


def _running_view(qtbot: QtBot, shown: bool = False) -> tuple[Profile, TimelineView]:
    """A timeline 1200x600 showing a run that is going on, one second of 1 kHz samples in."""
    live = profile(ram(1.0, 100 * MiB, interval=1 / RATE_HZ))
    live.complete = False
    view = TimelineView()
    qtbot.addWidget(view)
    view.resize(1200, 600)
    if shown:
        view.show()
        qtbot.waitExposed(view)
    view.set_profile(live, running=True)
    return live, view


def test_a_ten_minute_run_at_1_khz_hands_pyqtgraph_a_view_not_the_run(qtbot: QtBot) -> None:
    live, view = _running_view(qtbot)
    t = 1.0
    while t < MINUTES * 60:
        _grow(live, t)
        t += BLOCK_S
        view.refresh()  # as the window's timer does while the run grows

    curve = view.curves[MAIN_RSS.key]
    held = len(curve.item.xData)
    assert live.ram is not None
    assert curve.n == len(live.ram) > 590_000
    # The followed view is one minute wide: what pyqtgraph holds stays within a few minutes.
    assert held <= 4 * FOLLOW_WINDOW_S * RATE_HZ + 2 * BLOCK_S * RATE_HZ, held
    low = view.lane.getViewBox().viewRange()[0][0]
    assert curve.item.xData[0] <= low and curve.item.xData[-1] >= t - 1.0

    view.lane.setXRange(10.0, 20.0, padding=0)  # the user pans back to the start
    assert curve.item.xData[0] <= 10.0 and curve.item.xData[-1] >= t - 1.0

    view.set_running(False)  # the run ended: drawn from its levels, in view at once
    assert curve.levels and curve.item.xData[0] <= 10.0 and curve.item.xData[-1] >= 20.0
    view.zoom_to_fit()
    drawn = curve.item.xData
    assert float(np.min(drawn)) <= 0.01 and float(np.max(drawn)) >= t - 1.0  # all of it
    assert len(drawn) < curve.n / 100  # from a level: the min and max of blocks of rows


def _live_curve(seconds: float) -> tuple[Curve, np.ndarray, np.ndarray]:
    """A running run's curve of `seconds` at 1 kHz, taken in as frames bring it (a second at
    a time, never a whole block of the live level), with one sample's spike at 12.3457 s."""
    x = np.arange(int(seconds * RATE_HZ)) / RATE_HZ
    y = 100 * MiB + (x % 7) * MiB
    y[12_345] += 300 * MiB
    curve = Curve(pg.PlotDataItem())
    for start in range(0, len(x), 997):
        curve.extend(x[start : start + 997], y[start : start + 997], start + 997)
    return curve, x, y


def test_a_minute_in_view_at_1_khz_hands_pyqtgraph_each_blocks_low_and_high(qtbot: QtBot) -> None:
    curve, x, y = _live_curve(60.0)
    curve.clip_live(-np.inf, 60.0 / 1200)  # a minute across 1200 pixels: 50 samples a pixel
    handed_x, handed_y = curve.item.xData, curve.item.yData
    assert len(handed_x) < len(x) / 3  # two points per LIVE_FACTOR samples
    assert handed_y.max() == y.max() and handed_y.min() == y.min()  # the spike is drawn
    assert handed_x[0] == 0.0 and handed_x[-1] == x[-1] and handed_y[-1] == y[-1]  # up to now
    assert np.all(np.diff(handed_x) >= 0)
    # Each block's pair lies between its own samples' low and high.
    block = 1000 // LIVE_FACTOR
    start = 2 * block
    assert handed_x[start] == x[block * LIVE_FACTOR]
    samples = y[block * LIVE_FACTOR : (block + 1) * LIVE_FACTOR]
    assert list(handed_y[start : start + 2]) == [samples.min(), samples.max()]


def test_a_running_view_zoomed_in_to_seconds_shows_every_sample(qtbot: QtBot) -> None:
    curve, x, y = _live_curve(60.0)
    curve.clip_live(55.0, 5.0 / 1200)  # five seconds across 1200 pixels: 4 samples a pixel
    first = int(np.searchsorted(x, 55.0)) - 1
    assert np.array_equal(curve.item.xData, x[first:])
    assert np.array_equal(curve.item.yData, y[first:])
    curve.clip_live(55.0, 60.0 / 1200)  # zoomed out again, from the same place
    assert len(curve.item.xData) < (len(x) - first) / 3


def test_a_timeline_following_a_1_khz_run_zoomed_in_by_the_user_gets_the_samples(
    qtbot: QtBot,
) -> None:
    live, view = _running_view(qtbot)
    for start in range(1, 120, int(BLOCK_S)):
        _grow(live, float(start))
        view.refresh()
    curve = view.curves[MAIN_RSS.key]
    followed = len(curve.item.xData)
    assert followed < FOLLOW_WINDOW_S * RATE_HZ / 3  # a minute in view: the live level
    view.lane.setXRange(100.0, 101.0, padding=0)  # the user zooms in to one second
    shown = curve.item.xData
    assert np.all(np.diff(shown[(shown >= 100.0) & (shown <= 101.0)]) < 1.5 / RATE_HZ)


def test_a_curve_waiting_through_a_view_change_is_drawn_for_the_new_view(qtbot: QtBot) -> None:
    widget = pg.PlotWidget()
    qtbot.addWidget(widget)
    widget.resize(600, 300)
    plot = widget.getPlotItem()
    moved, quiet = (make_curve(plot, MAIN_RSS) for _ in range(2))
    x = np.arange(0.0, 100.0, 0.01)
    for item in (moved, quiet):
        item.setData(x, np.sin(x))
    plot.setXRange(0.0, 10.0, padding=0)
    for item in (moved, quiet):
        item.waits = True
    plot.setXRange(50.0, 60.0, padding=0)  # the view follows the run ...
    moved.setData(x, np.cos(x))  # ... one curve gets new points, the other none
    for item in (moved, quiet):
        item.end_wait()
        shown, _ = item.getData()  # what pyqtgraph draws: clipped to the view
        assert 49.0 <= shown[0] <= 50.0 and 60.0 <= shown[-1] <= 61.0
    assert np.allclose(moved.getData()[1], np.cos(moved.getData()[0]))


def test_new_samples_of_a_followed_run_are_painted_once(qtbot: QtBot) -> None:
    live, view = _running_view(qtbot, shown=True)
    paints: list[int] = []
    graphics = view.graphics
    original = type(graphics).paintEvent

    def counted_paint(event: QPaintEvent) -> None:
        paints.append(1)
        original(graphics, event)

    graphics.paintEvent = counted_paint
    for start in range(1, 40, int(BLOCK_S)):
        _grow(live, float(start))  # the sawtooth's range grows: y's auto range changes
        view.refresh()
        paints.clear()
        for _ in range(5):  # the paint, and any it asks for, are posted events
            QApplication.processEvents()
        assert len(paints) == 1


def test_a_finished_runs_levels_keep_every_spike_to_the_last_sample(qtbot: QtBot) -> None:
    curve, x, y = _live_curve(600.003)  # ten minutes at 1 kHz, three rows past a whole block
    y[-1] = 900 * MiB  # the run's last sample is its highest: it must be drawn at every zoom
    curve = Curve(pg.PlotDataItem())
    curve.extend(x, y, len(x))
    curve.build_levels()
    factors = [factor for factor, _xs, _ys in curve.levels]
    assert factors == [LIVE_FACTOR * 4**k for k in range(len(factors))] and len(factors) >= 3
    for factor, xs, ys in curve.levels:
        blocks = -(-len(x) // factor)  # the last one partial
        assert len(xs) == len(ys) == 2 * blocks
        assert ys.max() == 900 * MiB and ys.min() == y.min()
        assert np.array_equal(xs[0::2], x[::factor]) and np.array_equal(xs[0::2], xs[1::2])
        block = 7  # any block: its pair is its rows' lowest and highest
        rows = y[block * factor : (block + 1) * factor]
        assert list(ys[2 * block : 2 * block + 2]) == [rows.min(), rows.max()]


def test_rows_after_a_curves_levels_were_built_are_folded_as_if_it_had_none(
    qtbot: QtBot,
) -> None:
    """Building the levels puts the last partial block's low and high at the live level's
    end (no copy of it); rows that come later take that pair out before they fold."""
    curve, x, y = _live_curve(600.003)  # its last three rows are a partial block
    curve.build_levels()
    later_x = x[-1] + np.arange(1, 14) / RATE_HZ  # completes that block and starts another
    later_y = np.full(13, 50 * MiB)
    later_y[2] = 950 * MiB
    curve.extend(later_x, later_y, len(x) + 13)
    curve.build_levels()
    whole = Curve(pg.PlotDataItem())
    all_x, all_y = np.concatenate((x, later_x)), np.concatenate((y, later_y))
    whole.extend(all_x, all_y, len(all_x))
    whole.build_levels()
    assert [(f, xs.tolist(), ys.tolist()) for f, xs, ys in curve.levels] == [
        (f, xs.tolist(), ys.tolist()) for f, xs, ys in whole.levels
    ]
    assert curve.levels[0][2][-4:].tolist() == [50 * MiB, 950 * MiB, 50 * MiB, 50 * MiB]
    seconds_per_pixel = 60.0 / 1200
    for mine, theirs in zip(
        curve.points.live_points(-np.inf, seconds_per_pixel),
        whole.points.live_points(-np.inf, seconds_per_pixel),
        strict=True,
    ):
        assert mine.tolist() == theirs.tolist()
