"""The plots' building blocks: a curve that grows by new rows only and thins itself for long
runs, and a legend above the plot's data whose entries follow the palette and look hidden
when their curve is (clicking an entry's swatch or name hides or shows its curve). The axes
are in app/axes.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter
from PySide6.QtWidgets import QGraphicsItem, QGraphicsSimpleTextItem

from memsight.app.curvepoints import CurvePoints
from memsight.app.plaintext import tooltip
from memsight.profiler.profile.series import Series

HIDDEN_LABEL = "#9a9a9a"  # a legend entry whose curve the user hid, until a palette is set
LEGEND_POINTS = 8.0  # the entries' names
TITLE_POINTS = 10.0  # the plot's title, first in its legend's band
SWATCH_WIDTH, SWATCH_HEIGHT = 18, 12
SWATCH_GAP = 3  # between an entry's swatch and its name
ENTRY_GAP = 12  # between one entry and the next in a row
TITLE_GAP = 14  # between the title and the first entry
ROW_SPACING = 2


class Curve:
    """One curve on a plot: its points (app/curvepoints.py) and the pyqtgraph item that draws
    them, extended by new rows only.

    Converting and copying whole columns every frame would make each frame slower the longer
    a run goes; here a frame costs what arrived since the last one, and pyqtgraph draws views
    of the buffers clipped to the visible range. While a run goes on, pyqtgraph is handed
    only the points from `live_from` on: it takes the bounds of every point it holds at each
    update, so the whole buffer of a long run at 1 kHz would make each frame slower the longer
    the run goes (78 ms after 10 minutes). Where those points are many to a pixel (a minute
    in view at 1 kHz: about fifty), it is handed the live level instead (LIVE_FACTOR): the
    bounds, downsampling and updates of pyqtgraph's then cost a quarter.
    """

    def __init__(self, item: pg.PlotDataItem) -> None:
        self.item = item
        self.points = CurvePoints()
        self.live_from = -np.inf  # the earliest time handed to pyqtgraph while a run goes on
        # The view's seconds per pixel while a run goes on (0: not known, the samples shown).
        self.live_seconds_per_pixel = 0.0

    @property
    def n(self) -> int:
        return self.points.n

    @property
    def x(self) -> np.ndarray:
        return self.points.x

    @property
    def y(self) -> np.ndarray:
        return self.points.y

    @property
    def source_rows(self) -> int:
        return self.points.source_rows

    @property
    def levels(self) -> list[tuple[int, np.ndarray, np.ndarray]]:
        return self.points.levels

    def reset(self) -> None:
        self.points = CurvePoints()
        self.live_from = -np.inf
        self.item.range_driven = False
        self.item.setData([], [])

    def adopt(self, points: CurvePoints) -> None:
        """Take points made ready elsewhere (a finished run's, in a worker thread); they are
        drawn by the next show_range."""
        self.points = points
        self.live_from = -np.inf

    def clip_live(self, start: float, seconds_per_pixel: float) -> None:
        """From now on hand pyqtgraph the points from time `start` on (-inf: all of them), for
        a view of `seconds_per_pixel`."""
        if start != self.live_from or seconds_per_pixel != self.live_seconds_per_pixel:
            self.live_from = start
            self.live_seconds_per_pixel = seconds_per_pixel
            if self.n:
                self.show_live()

    def show_live(self) -> None:
        """Hand pyqtgraph what the running view shows (CurvePoints.live_points)."""
        self.item.range_driven = False
        self.item.setData(*self.points.live_points(self.live_from, self.live_seconds_per_pixel))

    def build_levels(self) -> None:
        self.points.build_levels()

    def show_range(self, low: float, high: float, pixels: int) -> None:
        """Draw the level that gives about two points per pixel between low and high."""
        self.item.range_driven = True
        self.item.setData(*self.points.range_points(low, high, pixels))

    def extend(self, x: np.ndarray, y: np.ndarray, source_rows: int, show: bool = True) -> None:
        """Take in new rows. `show`: hand pyqtgraph the live points now; False for a finished
        run, whose curves are drawn from their levels once built (show_range)."""
        if self.points.extend(x, y, source_rows) and show:
            self.show_live()


class CurveItem(pg.PlotDataItem):
    """pyqtgraph's curve, whose redraw for a new x range can wait for the frame's new points.

    A frame that follows a running run moves the view and hands each curve its new points,
    and pyqtgraph rebuilds a curve's display data (clipped to the view and downsampled) at
    each: twice a frame. While `waits` is set, a change of the view's range only marks the
    curve for a rebuild, which its next setData does, or else end_wait.
    """

    waits = False  # set by the timeline around a range change that new points follow
    stale = False  # the view's range changed while waiting
    # Handed the points of each x range by the timeline (Curve.show_range: a finished run).
    # Its handler of the view's range runs after the linked views' (timeline.py connects it
    # after linking them), so a rebuild for a new x range here would be replaced at once:
    # skipped, half the curves' work in a frame of a pan across a long run.
    range_driven = False

    def viewRangeChanged(self, vb: Any = None, ranges: Any = None, changed: Any = None) -> None:
        if self.waits:
            self.stale = True
            return
        if self.range_driven and changed is not None and changed[0]:
            if not changed[1]:
                return
            changed = [False, True]  # the y part still updates what pyqtgraph keeps of it
        super().viewRangeChanged(vb, ranges, changed)

    def setData(self, *args: Any, **kwargs: Any) -> None:
        self.stale = False  # the display data is rebuilt for the view as it is now
        super().setData(*args, **kwargs)

    def end_wait(self) -> None:
        """Stop waiting; rebuild now if the range changed and no new points came since."""
        self.waits = False
        if self.stale:
            self.stale = False
            super().viewRangeChanged()


def make_curve(plot: pg.PlotItem, series: Series, style: Qt.PenStyle | None = None) -> CurveItem:
    # One-pixel pens: wider ones are drawn segment by segment, several times slower in
    # software rendering, which decides whether a long run pans at 30 frames per second.
    if style is None:
        style = Qt.PenStyle.DashLine if series.dashed else Qt.PenStyle.SolidLine
    pen = pg.mkPen(color=series.color, width=1, style=style)
    item = CurveItem(name=series.label, pen=pen, skipFiniteCheck=True)
    plot.addItem(item)
    item.setDownsampling(auto=True, method="peak")
    # Peak downsampling keeps each bin's lowest and highest value, so one bin per pixel draws
    # what more would. pyqtgraph bins only past 5 points a pixel by default: a level of up to
    # 8 points a pixel was painted whole, and a GPU curve that swings every step paints a
    # segment across the plot's height for each point.
    item.opts["autoDownsampleFactor"] = 1.0
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
    for item, label in entries:
        legend.addItem(item, label)
    paint_labels(legend)


def paint_labels(legend: PlotLegend) -> None:
    """Each label in the legend's text colour, or greyed while its curve is hidden."""
    color = legend.opts["labelTextColor"]
    hidden = legend.opts["hiddenTextColor"]
    for sample, label in legend.items:
        label.setText(label.text, color=color if sample.item.isVisible() else hidden)


def make_legend(plot: pg.PlotItem, title: str) -> PlotLegend:
    """The plot's title and legend, above its data (in place of pyqtgraph's title)."""
    legend = PlotLegend(plot, title)
    # The swatch or the name hides or shows the curve on a click; the name then says which.
    legend.sigSampleClicked.connect(lambda _item: paint_labels(legend))
    return legend


def flow(
    widths: list[float], first: float, indent: float, width: float
) -> tuple[int, list[tuple[float, int]]]:
    """(rows, each entry's (x, row)): entries of these widths side by side from x = `first`,
    a new row at x = `indent` where the next would pass `width` (one wider than that alone on its row)."""
    places = []
    x, row = first, 0
    for entry_width in widths:
        if x > indent and x + entry_width > width:
            x, row = indent, row + 1
        places.append((x, row))
        x += entry_width + ENTRY_GAP
    return row + 1, places


class LegendSwatch(pg.ItemSample):
    """An entry's line sample, as high as a row of legend text (pyqtgraph's is 20 px)."""

    def __init__(self, item: pg.PlotDataItem) -> None:
        super().__init__(item)
        self.setFixedWidth(SWATCH_WIDTH)
        self.setFixedHeight(SWATCH_HEIGHT)
        self.setCursor(Qt.CursorShape.PointingHandCursor)

    def boundingRect(self) -> QRectF:
        return QRectF(0, 0, SWATCH_WIDTH, SWATCH_HEIGHT)

    def paint(self, painter: QPainter, *_: Any) -> None:
        pen = pg.mkPen(self.item.opts["pen"])
        if not self.item.isVisible():
            # A hidden curve: its sample dotted, in the colour of the hidden entry's name.
            legend = self.parentItem()
            hidden = legend.opts["hiddenTextColor"] if isinstance(legend, PlotLegend) else None
            pen = pg.mkPen(hidden or HIDDEN_LABEL, width=1, style=Qt.PenStyle.DotLine)
        painter.setPen(pen)
        painter.drawLine(QPointF(0, SWATCH_HEIGHT / 2), QPointF(SWATCH_WIDTH, SWATCH_HEIGHT / 2))


class EntryLabel(pg.GraphicsWidget):
    """An entry's name, as plain text; a click on it hides or shows the curve, as a click on
    its swatch does. setText, .text and .opts["color"] are those of pyqtgraph's LabelItem."""

    def __init__(self, text: str, swatch: LegendSwatch, font: QFont, parent: QGraphicsItem) -> None:
        super().__init__(parent)
        self.swatch = swatch
        self.text = text
        self.opts: dict[str, Any] = {"color": None}
        self._shown = QGraphicsSimpleTextItem(self)
        self._shown.setFont(font)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip(tooltip(f"{text}\n(click to hide or show the curve)"))
        self.setText(text)

    def setText(self, text: str, color: QColor | None = None) -> None:
        if color is not None:
            self.opts["color"] = QColor(color)
            self._shown.setBrush(QColor(color))
        if text != self.text or not self._shown.text():
            self.text = text
            self.fit(None)

    def full_width(self) -> float:
        return float(QFontMetricsF(self._shown.font()).horizontalAdvance(self.text))

    def fit(self, width: float | None) -> None:
        """Show the name whole, or cut with an ellipsis to `width` pixels."""
        metrics = QFontMetricsF(self._shown.font())
        shown = (
            self.text
            if width is None
            else metrics.elidedText(self.text, Qt.TextElideMode.ElideRight, width)
        )
        if shown != self._shown.text():
            self._shown.setText(shown)
        rect = self._shown.boundingRect()
        self.resize(rect.width(), rect.height())

    def boundingRect(self) -> QRectF:
        return QRectF(QPointF(0, 0), self.size())

    def mouseClickEvent(self, event: Any) -> None:
        self.swatch.mouseClickEvent(event)


class PlotLegend(pg.GraphicsWidget):
    """A plot's title and legend in a band of their own above its data, so that they never
    cover a curve: the title, then the entries side by side, on as many rows as the plot's
    width needs (a job of many ranks has many entries; a small window has little width).

    It takes pyqtgraph's LegendItem's place as `plot.legend` (addItem, removeItem, clear,
    items, sigSampleClicked), so the plot adds and removes named curves in it as it would.
    """

    sigSampleClicked = Signal(object)

    def __init__(self, plot: pg.PlotItem, title: str) -> None:
        super().__init__()
        self.plot = plot
        self.items: list[tuple[LegendSwatch, EntryLabel]] = []
        self.opts: dict[str, Any] = {
            "labelTextColor": QColor("black"),
            "hiddenTextColor": QColor(HIDDEN_LABEL),
        }
        self.entry_font = QFont()
        self.entry_font.setPointSizeF(LEGEND_POINTS)
        title_font = QFont()
        title_font.setPointSizeF(TITLE_POINTS)
        self.title = QGraphicsSimpleTextItem(title, self)
        self.title.setFont(title_font)
        self._height = -1.0
        plot.setTitle(None)
        plot.layout.removeItem(plot.titleLabel)  # this band is the plot's title
        plot.legend = self
        # Row 0 of the plot's own layout (pyqtgraph's title row), across its axis and data.
        plot.layout.addItem(self, 0, 0, 1, 3)
        self.relayout()

    def addItem(self, item: pg.PlotDataItem, name: str) -> None:
        swatch = LegendSwatch(item)
        swatch.setParentItem(self)
        swatch.sigClicked.connect(self.sigSampleClicked)
        label = EntryLabel(name, swatch, self.entry_font, self)
        label.setText(name, color=self.opts["labelTextColor"])
        self.items.append((swatch, label))
        self.relayout()

    def removeItem(self, item: pg.PlotDataItem) -> None:
        for swatch, label in self.items:
            if swatch.item is item:
                self.items.remove((swatch, label))
                self._drop(swatch, label)
                self.relayout()
                return

    def clear(self) -> None:
        for swatch, label in self.items:
            self._drop(swatch, label)
        self.items = []
        self.relayout()

    def set_colors(self, text: QColor, hidden: QColor) -> None:
        """The title's and the names' colour, and that of a hidden curve's name."""
        self.opts["labelTextColor"] = QColor(text)
        self.opts["hiddenTextColor"] = QColor(hidden)
        self.title.setBrush(QColor(text))
        paint_labels(self)

    def resizeEvent(self, event: Any) -> None:
        super().resizeEvent(event)
        self.relayout()

    def relayout(self) -> None:
        """Place the title and the entries in rows across the legend's width, and give the
        plot's title row their height. Runs when the entries or the width change."""
        width = self.size().width()
        if width <= 0:
            return
        row_height = max(SWATCH_HEIGHT, QFontMetricsF(self.entry_font).height()) + ROW_SPACING
        title = self.title.boundingRect()
        self.title.setPos(0, max(0.0, (row_height - title.height()) / 2))
        first = title.width() + TITLE_GAP
        widths = [SWATCH_WIDTH + SWATCH_GAP + label.full_width() for _swatch, label in self.items]
        # Rows after the first start under the first entry (the title stands apart), unless
        # starting them at the left edge takes fewer rows.
        layouts = [flow(widths, first, indent, width) for indent in (first, 0.0)]
        places = min(layouts, key=lambda layout: layout[0])[1]
        rows = 1
        for (swatch, label), (x, row) in zip(self.items, places, strict=True):
            y = row * row_height
            # A name wider than the plot is cut with an ellipsis, not by the plot's edge.
            label.fit(max(0.0, width - x - SWATCH_WIDTH - SWATCH_GAP))
            swatch.setPos(x, y + (row_height - SWATCH_HEIGHT) / 2)
            label.setPos(
                x + SWATCH_WIDTH + SWATCH_GAP, y + (row_height - label.size().height()) / 2
            )
            rows = row + 1
        height = rows * row_height
        if height != self._height:
            self._height = height
            self.plot.layout.setRowFixedHeight(0, height)
            self.setMinimumHeight(height)
            self.setMaximumHeight(height)

    def paint(self, *_: Any) -> None:
        pass  # only its title and entries are drawn

    @staticmethod
    def _drop(*parts: QGraphicsItem) -> None:
        for part in parts:
            scene = part.scene()  # none for a plot out of the layout (a run without CUDA)
            part.setParentItem(None)  # type: ignore[arg-type]  # None unparents
            if scene:
                scene.removeItem(part)


class HeadroomViewBox(pg.ViewBox):
    """A view box whose automatic y range leaves `headroom_px` pixels free at its top: the
    band where the labels of the lines across the plots go ("exit: exit code 1", "OOM: ..."),
    so that they never cover a curve at its peak. A range the user set is left alone."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.headroom_px = 0.0

    def set_headroom(self, pixels: float) -> None:
        if pixels != self.headroom_px:
            self.headroom_px = pixels
            self.updateAutoRange()

    def setRange(self, *args: Any, **kwargs: Any) -> None:
        y_range = kwargs.get("yRange")
        # Only the automatic range (updateAutoRange calls this with the data's y range).
        if self._updatingRange and y_range is not None and self.headroom_px > 0:
            height = float(self.height())
            share = self.headroom_px / height if height > 0 else 0.0
            low, high = float(y_range[0]), float(y_range[1])
            if 0.0 < share < 0.5 and high > low:
                # The data's top `headroom_px` below the view's: share of the new span.
                kwargs["yRange"] = (low, (high - share * low) / (1.0 - share))
        super().setRange(*args, **kwargs)
