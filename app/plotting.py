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

from memsight.app.plaintext import tooltip
from memsight.profiler.profile.columns import ColumnStore
from memsight.profiler.profile.halves import in_halves
from memsight.profiler.profile.series import Series

LEVEL_FACTOR = 4
MIN_LEVEL_POINTS = 2048  # a curve is thinned into levels once it holds this many points
# While a run goes on, a curve whose view holds LIVE_MIN_SAMPLES_PER_PIXEL samples per pixel
# or more is handed, for its complete blocks of LIVE_FACTOR rows, each block's lowest and
# highest value: a quarter of the points, which pyqtgraph's peak downsampling then takes to
# two per pixel as it would the samples themselves.
LIVE_FACTOR = 8
LIVE_MIN_SAMPLES_PER_PIXEL = 2 * LIVE_FACTOR
# A finished run's curve of this many blocks or more is folded in two threads (a day-long
# run's 1.1 million: 0.2 s a curve in one).
PARALLEL_FOLD_BLOCKS = 1 << 18

HIDDEN_LABEL = "#9a9a9a"  # a legend entry whose curve the user hid, until a palette is set
LEGEND_POINTS = 8.0  # the entries' names
TITLE_POINTS = 10.0  # the plot's title, first in its legend's band
SWATCH_WIDTH, SWATCH_HEIGHT = 18, 12
SWATCH_GAP = 3  # between an entry's swatch and its name
ENTRY_GAP = 12  # between one entry and the next in a row
TITLE_GAP = 14  # between the title and the first entry
ROW_SPACING = 2


def _fold(
    values: np.ndarray, op: np.ufunc, factor: int = LEVEL_FACTOR, out: np.ndarray | None = None
) -> np.ndarray:
    """`op` (np.minimum, np.maximum) over each block of `factor` consecutive values, a
    partial last block left out, into `out` when given (a strided view: a level's lows or
    highs, in place). Elementwise over strided views: ten times faster than
    reshape(-1, 4).min(axis=1), which numpy reduces one four-value row at a time (95 ms for
    the curves of a 10-minute run at 1 kHz, in the frame that ends the run)."""
    end = len(values) // factor * factor
    folded: np.ndarray = op(values[0:end:factor], values[1:end:factor], out=out)
    for offset in range(2, factor):
        op(folded, values[offset:end:factor], out=folded)
    return folded


def _fold_all(values: np.ndarray, op: np.ufunc, factor: int) -> np.ndarray:
    """_fold, the partial last block included: a spike in a run's last rows stays drawn."""
    folded = _fold(values, op, factor)
    end = len(folded) * factor
    if end == len(values):
        return folded
    return np.append(folded, op.reduce(values[end:]))


class Curve:
    """One curve's points in growable float64 buffers, extended by new rows only.

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
        self._points = ColumnStore({"x": np.float64, "y": np.float64})
        self.source_rows = 0  # rows of the source table already taken in
        self.levels: list[tuple[int, np.ndarray, np.ndarray]] = []
        self.live_from = -np.inf  # the earliest time handed to pyqtgraph while a run goes on
        # The view's seconds per pixel while a run goes on (0: not known, the samples shown).
        self.live_seconds_per_pixel = 0.0
        # Per complete block of LIVE_FACTOR rows: (its first time, its lowest value) and (its
        # first time, its highest value), kept up to date as rows arrive.
        self._live_level = ColumnStore({"x": np.float64, "y": np.float64})

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
        self.live_from = -np.inf
        self._live_level = ColumnStore({"x": np.float64, "y": np.float64})
        self.item.setData([], [])

    def clip_live(self, start: float, seconds_per_pixel: float) -> None:
        """From now on hand pyqtgraph the points from time `start` on (-inf: all of them), for
        a view of `seconds_per_pixel`."""
        if start != self.live_from or seconds_per_pixel != self.live_seconds_per_pixel:
            self.live_from = start
            self.live_seconds_per_pixel = seconds_per_pixel
            if self.n:
                self._show_live()

    def _show_live(self) -> None:
        x, y = self.x, self.y
        first = 0
        if self.live_from > -np.inf:
            first = max(0, int(np.searchsorted(x, self.live_from)) - 1)
        if not self._dense(first):
            self.item.setData(x[first:], y[first:])
            return
        start = 2 * (first // LIVE_FACTOR)  # the level's pair of the block holding `first`
        # The level's blocks, but for the one holding the newest sample: the curve ends on it.
        blocks = min(len(self._live_level) // 2, (self.n - 1) // LIVE_FACTOR)
        level_x, level_y = self._live_level.column("x"), self._live_level.column("y")
        tail = blocks * LIVE_FACTOR
        self.item.setData(
            np.concatenate((level_x[start : 2 * blocks], x[tail:])),
            np.concatenate((level_y[start : 2 * blocks], y[tail:])),
        )

    def _dense(self, first: int) -> bool:
        """Whether the points from row `first` on are many to a pixel of the running view."""
        count = self.n - first
        if count < 2 * LIVE_MIN_SAMPLES_PER_PIXEL or self.live_seconds_per_pixel <= 0:
            return False
        x = self.x
        span = float(x[-1] - x[first])
        per_pixel = count / span * self.live_seconds_per_pixel if span > 0 else 0.0
        return per_pixel >= LIVE_MIN_SAMPLES_PER_PIXEL

    def _extend_live_level(self) -> None:
        """Fold the complete blocks of LIVE_FACTOR rows that arrived into the live level."""
        done = len(self._live_level) // 2 * LIVE_FACTOR
        end = self.n // LIVE_FACTOR * LIVE_FACTOR
        if end <= done:
            return
        blocks = (end - done) // LIVE_FACTOR
        level = {"x": np.empty(2 * blocks), "y": np.empty(2 * blocks)}
        x, y = self.x[done:end], self.y[done:end]

        def fold(first: int, last: int) -> None:  # blocks first..last, in place in `level`
            rows = slice(first * LIVE_FACTOR, last * LIVE_FACTOR)
            starts = x[rows][::LIVE_FACTOR]
            level["x"][2 * first : 2 * last : 2] = starts
            level["x"][2 * first + 1 : 2 * last : 2] = starts
            _fold(y[rows], np.minimum, LIVE_FACTOR, level["y"][2 * first : 2 * last : 2])
            _fold(y[rows], np.maximum, LIVE_FACTOR, level["y"][2 * first + 1 : 2 * last : 2])

        in_halves(blocks, fold, PARALLEL_FOLD_BLOCKS)  # a finished run's whole curve
        if len(self._live_level) or not self._live_level.adopt(level):
            self._live_level.append(level, 2 * blocks)

    def build_levels(self) -> None:
        """Min/max summaries at 8x, 32x, 128x ... fewer points, for a finished run.

        Each level keeps, for every block of rows (the last one partial), its lowest and its
        highest value, so a spike survives at every zoom; a frame then draws about two points
        per pixel whatever the length of the run. The first is the live level, folded as the
        rows arrived, and each next one folds the one before: the frame that ends a run reads
        an eighth of its rows, not all of them once per level.
        """
        self.levels = []
        n = self.n
        if n // LIVE_FACTOR < MIN_LEVEL_POINTS:
            return
        pairs_x, pairs_y = self._live_level.column("x"), self._live_level.column("y")
        tail = len(pairs_x) // 2 * LIVE_FACTOR
        if tail < n:  # the last rows, fewer than a block
            rest = self.y[tail:]
            pairs_x = np.append(pairs_x, (self.x[tail], self.x[tail]))
            pairs_y = np.append(pairs_y, (rest.min(), rest.max()))
        self.levels.append((LIVE_FACTOR, pairs_x, pairs_y))
        starts, lows, highs = pairs_x[0::2], pairs_y[0::2], pairs_y[1::2]
        factor = LIVE_FACTOR * LEVEL_FACTOR
        while len(starts) > 2 * MIN_LEVEL_POINTS:  # the next level still has a thousand blocks
            starts = starts[::LEVEL_FACTOR]
            lows = _fold_all(lows, np.minimum, LEVEL_FACTOR)
            highs = _fold_all(highs, np.maximum, LEVEL_FACTOR)
            self.levels.append((factor, _pairs(starts, starts), _pairs(lows, highs)))
            factor *= LEVEL_FACTOR

    def show_range(self, low: float, high: float, pixels: int) -> None:
        """Draw the level that gives about two points per pixel between low and high."""
        x = self.x
        first = max(0, int(np.searchsorted(x, low)) - 1)
        last = min(self.n, int(np.searchsorted(x, high)) + 1)
        wanted = max(1, (last - first) // max(pixels, 1))
        level = None
        for candidate in self.levels:
            if candidate[0] <= wanted:
                level = candidate
        if level is None:  # zoomed in to single samples: those in view and one either side
            self.item.setData(x[first:last], self.y[first:last])
            return
        factor, xs, ys = level
        a, b = 2 * (first // factor), 2 * (last // factor + 1)
        self.item.setData(xs[a:b], ys[a:b])

    def extend(self, x: np.ndarray, y: np.ndarray, source_rows: int, show: bool = True) -> None:
        """Take in new rows. `show`: hand pyqtgraph the live points now; False for a finished
        run, whose curves are drawn from their levels once built (show_range)."""
        self.source_rows = source_rows
        added = len(x)
        if not added:
            return
        # A finished run's curves take its times as they are (views, never written to):
        # a day-long run's seven curves would otherwise copy 8.6 million times each.
        points = {"x": _float64(x), "y": _float64(y)}
        if self.n or not self._points.adopt(points):
            self._points.append(points, added)
        self._extend_live_level()
        if show:
            self._show_live()


def _float64(values: np.ndarray) -> np.ndarray:
    """`values` as float64: itself when it is, else converted, a long column in two halves
    on two threads (a day-long run's RSS: 8.6 million values, 0.13 s in one)."""
    if values.dtype == np.float64:
        return values
    out = np.empty(len(values), dtype=np.float64)

    def convert(start: int, stop: int) -> None:
        out[start:stop] = values[start:stop]

    in_halves(len(values), convert, PARALLEL_FOLD_BLOCKS * LIVE_FACTOR)
    return out


def _pairs(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """first[0], second[0], first[1], second[1], ...: two strided copies (np.repeat of one
    array takes 2.5 times as long)."""
    out = np.empty(2 * len(first), dtype=np.float64)
    out[0::2] = first
    out[1::2] = second
    return out


class CurveItem(pg.PlotDataItem):
    """pyqtgraph's curve, whose redraw for a new x range can wait for the frame's new points.

    A frame that follows a running run moves the view and hands each curve its new points,
    and pyqtgraph rebuilds a curve's display data (clipped to the view and downsampled) at
    each: twice a frame. While `waits` is set, a change of the view's range only marks the
    curve for a rebuild, which its next setData does, or else end_wait.
    """

    waits = False  # set by the timeline around a range change that new points follow
    stale = False  # the view's range changed while waiting

    def viewRangeChanged(self, vb: Any = None, ranges: Any = None, changed: Any = None) -> None:
        if self.waits:
            self.stale = True
            return
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
