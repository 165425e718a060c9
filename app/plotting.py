"""The plots' building blocks: a curve that grows by new rows only and thins itself for long
runs, and a legend whose entries follow the palette and look hidden when their curve is
(clicking an entry hides or shows its curve). The axes are in app/axes.py."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from profiler.profile.columns import ColumnStore
from profiler.profile.series import Series

LEVEL_FACTOR = 4
MIN_LEVEL_POINTS = 2048  # a curve is thinned into levels once it holds this many points

HIDDEN_LABEL = "#9a9a9a"  # a legend entry whose curve the user hid
MAX_ROWS_ONE_COLUMN = 5  # a legend of more entries takes two columns


class Curve:
    """One curve's points in growable float64 buffers, extended by new rows only.

    Converting and copying whole columns every frame would make each frame slower the longer
    a run goes; here a frame costs what arrived since the last one, and pyqtgraph draws views
    of the buffers clipped to the visible range.
    """

    def __init__(self, item: pg.PlotDataItem) -> None:
        self.item = item
        self._points = ColumnStore({"x": np.float64, "y": np.float64})
        self.source_rows = 0  # rows of the source table already taken in
        self.levels: list[tuple[int, np.ndarray, np.ndarray]] = []

    @property
    def n(self) -> int:
        return len(self._points)

    @property
    def x(self) -> np.ndarray:
        return self._points.column("x")

    @property
    def y(self) -> np.ndarray:
        return self._points.column("y")

    def reset(self) -> None:
        self._points = ColumnStore({"x": np.float64, "y": np.float64})
        self.source_rows = 0
        self.levels = []
        self.item.setData([], [])

    def build_levels(self) -> None:
        """Min/max summaries at 4x, 16x, 64x ... fewer points, for a finished run.

        Each level keeps, for every block of rows, its lowest and its highest value, so a
        spike survives at every zoom; a frame then draws about two points per pixel whatever
        the length of the run.
        """
        self.levels = []
        x, y = self.x, self.y
        factor = LEVEL_FACTOR
        lows, highs = y, y
        while self.n // factor >= MIN_LEVEL_POINTS:
            blocks = len(lows) // LEVEL_FACTOR
            lows = lows[: blocks * LEVEL_FACTOR].reshape(blocks, LEVEL_FACTOR).min(axis=1)
            highs = highs[: blocks * LEVEL_FACTOR].reshape(blocks, LEVEL_FACTOR).max(axis=1)
            xs = np.repeat(x[: blocks * factor : factor], 2)
            self.levels.append((factor, xs, np.column_stack((lows, highs)).ravel()))
            factor *= LEVEL_FACTOR

    def show_range(self, low: float, high: float, pixels: int) -> None:
        """Draw the level that gives about two points per pixel between low and high."""
        if not self.levels:
            return
        x = self.x
        first = max(0, int(np.searchsorted(x, low)) - 1)
        last = min(self.n, int(np.searchsorted(x, high)) + 1)
        wanted = max(1, (last - first) // max(pixels, 1))
        level = None
        for candidate in self.levels:
            if candidate[0] <= wanted:
                level = candidate
        if level is None:
            self.item.setData(x, self.y)
            return
        factor, xs, ys = level
        a, b = 2 * (first // factor), 2 * (last // factor + 1)
        self.item.setData(xs[a:b], ys[a:b])

    def extend(self, x: np.ndarray, y: np.ndarray, source_rows: int) -> None:
        self.source_rows = source_rows
        added = len(x)
        if not added:
            return
        self._points.append({"x": x, "y": y}, added)
        self.item.setData(self.x, self.y)


def make_curve(
    plot: pg.PlotItem, series: Series, style: Qt.PenStyle | None = None
) -> pg.PlotDataItem:
    # One-pixel pens: wider ones are drawn segment by segment, several times slower in
    # software rendering, which decides whether a long run pans at 30 frames per second.
    if style is None:
        style = Qt.PenStyle.DashLine if series.dashed else Qt.PenStyle.SolidLine
    pen = pg.mkPen(color=series.color, width=1, style=style)
    item = plot.plot(name=series.label, pen=pen, skipFiniteCheck=True)
    item.setDownsampling(auto=True, method="peak")
    item.setClipToView(True)
    return item


def legend_entries(plot: pg.PlotItem) -> list[tuple[pg.PlotDataItem, str]]:
    """(curve, label) of each entry of a plot's legend, in order."""
    return [(sample.item, label.text) for sample, label in plot.legend.items]


def set_entries(plot: pg.PlotItem, entries: list[tuple[pg.PlotDataItem, str]]) -> None:
    """The legend lists exactly these curves, in this order, under these labels."""
    legend = plot.legend
    if legend_entries(plot) == entries:
        return
    legend.clear()
    # A job of many ranks: two columns, so the legend covers less of the curves.
    legend.setColumnCount(1 if len(entries) <= MAX_ROWS_ONE_COLUMN else 2)
    for item, label in entries:
        legend.addItem(item, label)
    paint_labels(legend)


def rename_entry(plot: pg.PlotItem, item: pg.PlotDataItem, label: str) -> None:
    for sample, text in plot.legend.items:
        if sample.item is item and text.text != label:
            text.setText(label)


def paint_labels(legend: pg.LegendItem) -> None:
    """Each label in the legend's text colour, or greyed while its curve is hidden.

    LabelItem.setAttr alone keeps the text already rendered, so each label is set again.
    """
    color = legend.opts.get("labelTextColor")
    for sample, label in legend.items:
        shown = sample.item.isVisible()
        wanted = color if shown else QColor(HIDDEN_LABEL)
        if wanted is None:
            continue
        label.setText(label.text, color=wanted)


def make_legend(plot: pg.PlotItem) -> pg.LegendItem:
    legend = plot.addLegend(offset=(6, 4), labelTextSize="8pt")
    # pyqtgraph hides or shows the curve on a click; the label then says which it is.
    legend.sigSampleClicked.connect(lambda _item: paint_labels(legend))
    return legend
