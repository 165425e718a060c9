"""The event lane under the timeline's plots, and the lines it draws across them.

The lane shows iterations, epochs, forward and backward phases, and a mark at each error and at
the exit; an OOM, an uncaught error and the exit also get a line across the RAM and GPU plots,
labelled on the RAM plot, as do the censuses the contents panel shows (mark_times). The lane
owns its plot; the TimelineView links the plots' time axes to it.

The lines' labels are laid out together (LineLabels), in pixels, whenever the lines, the time
range or the plot's size change: a run's OOM, its uncaught error and its exit come a few
milliseconds apart, at the right edge, and each label must still be read whole.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter
from PySide6.QtWidgets import QGraphicsItem, QGraphicsSimpleTextItem

from memsight.app.axes import SecondsAxis, without_si_prefix
from memsight.app.jobview import event_count, event_label, later_sighting, process_marks
from memsight.app.plaintext import MAX_LABEL, shorten, tooltip
from memsight.app.plotting import HeadroomViewBox
from memsight.profiler.profile.model import Profile, SampleTable
from memsight.profiler.profile.series import MARK_COLORS
from memsight.profiler.profile.spanindex import (
    PHASE_KINDS,
    ready_span_index,
    span_index,
    spans_overlapping,
)

MAX_SPANS_DRAWN = 1500
MAX_EVENT_LINES = 50  # lines across the plots at errors and the exit; the rest are marks only
MAX_EVENT_MARKS = 2000  # marks in the event lane (and the exit's): a hostile file may hold millions
MAX_STEPS_DRAWN = 3000  # iteration ticks are drawn when this few are in view

# Marks take their colours from profiler.profile.series, shared with the report.
COLORS = MARK_COLORS
CENSUS_COLOR = "#8e44ad"  # the census the contents panel shows: apart from every other mark

LABEL_PAD = 3.0  # between a line and its label
LABEL_GAP = 8.0  # between two labels side by side
LABEL_EDGE = 2.0  # between a label and the plot's edge
JOINED = " · "  # between the texts of labels that had no room apart
MIN_LIGHTNESS_GAP = 120  # between a label's colour and the background (of 255)


def mark_tip(x: float, y: float, data: Any) -> str:
    """A lane mark's tooltip: what happened, and when."""
    return tooltip(f"{data}\nat {x:.3f} s")


@dataclass(frozen=True)
class LineLabel:
    """The label of a line across the plots, drawn on the RAM plot."""

    t: float
    text: str
    color: str
    # A census mark's label sits left of its line, an error's or the exit's right of it (left
    # near the plot's right edge); all in the band above the curves.
    census: bool = False


@dataclass
class Placement:
    """Where a label is drawn: `row` from the top, from `left` pixels; the texts of labels
    merged into it where they had no room apart."""

    x: float  # its line, pixels from the plot's left edge
    left: float
    width: float
    row: int
    text: str
    color: str
    parts: list[str] = field(default_factory=list)

    @property
    def right(self) -> float:
        return self.left + self.width


def place_labels(
    labels: Sequence[tuple[float, LineLabel]],
    width: float,
    rows: int,
    measure: Callable[[str], float],
    elide: Callable[[str, float], str],
) -> list[Placement]:
    """Lay out labels of lines at these x (pixels, in order) in `rows` rows across `width`
    pixels: each beside its line on its preferred side, else on the other, else over its line,
    in the first row where it covers no other label, and never past an edge. A label with no
    room in any row joins the nearest label's text ("OOM: RuntimeError · exit: exit code 1"),
    cut with an ellipsis where even that has no room."""
    placed: list[Placement] = []
    widest = width - 2 * LABEL_EDGE
    if rows <= 0 or widest <= 0:
        return placed
    for x, label in labels:
        text = label.text
        if measure(text) > widest:
            text = elide(text, widest)
        text_width = measure(text)
        spot = _free_spot(placed, x, text_width, width, rows, right_first=not label.census)
        if spot is not None:
            row, left = spot
            placed.append(Placement(x, left, text_width, row, text, label.color, [label.text]))
        elif placed:
            nearest = min(placed, key=lambda p: abs(p.x - x))
            if label.text not in nearest.parts:
                nearest.parts.append(label.text)
                _refit(nearest, placed, width, measure, elide)
    return placed


def _free_spot(
    placed: list[Placement], x: float, text_width: float, width: float, rows: int, right_first: bool
) -> tuple[int, float] | None:
    """(row, left) of the first place for a label this wide, or None where none is free."""
    right, left = x + LABEL_PAD, x - LABEL_PAD - text_width
    over = min(max(LABEL_EDGE, right), width - LABEL_EDGE - text_width)  # over its line
    sides = (right, left, over) if right_first else (left, right, over)
    starts = [s for s in sides if s >= LABEL_EDGE and s + text_width <= width - LABEL_EDGE]
    for row in range(rows):
        taken = [(p.left, p.right) for p in placed if p.row == row]
        for start in starts:
            end = start + text_width
            if all(end + LABEL_GAP <= a or b + LABEL_GAP <= start for a, b in taken):
                return row, start
    return None


def _refit(
    target: Placement,
    placed: list[Placement],
    width: float,
    measure: Callable[[str], float],
    elide: Callable[[str, float], str],
) -> None:
    """`target` with its parts joined, in the room its row leaves it, on its line's side."""
    others = [p for p in placed if p.row == target.row and p is not target]
    low = max((p.right + LABEL_GAP for p in others if p.right <= target.left), default=LABEL_EDGE)
    high = min((p.left - LABEL_GAP for p in others if p.left >= target.right), default=width)
    high = min(high, width - LABEL_EDGE)
    text = JOINED.join(target.parts)
    if measure(text) > high - low:
        text = elide(text, high - low)
    text_width = measure(text)
    on_right = target.left >= target.x
    start = target.x + LABEL_PAD if on_right else target.x - LABEL_PAD - text_width
    target.text, target.width = text, text_width
    target.left = min(max(low, start), high - text_width)


def readable(color: QColor, background: QColor) -> QColor:
    """`color`, lightened or darkened where it is too close to the background to read (the
    exit's dark grey on a dark palette)."""
    gap = color.lightness() - background.lightness()
    if abs(gap) >= MIN_LIGHTNESS_GAP:
        return color
    wanted = background.lightness() + (
        MIN_LIGHTNESS_GAP if background.lightness() < 128 else -MIN_LIGHTNESS_GAP
    )
    return QColor.fromHsl(
        color.hslHue(), color.hslSaturation(), max(0, min(255, wanted)), color.alpha()
    )


class LabelText(QGraphicsSimpleTextItem):
    """A line's label: plain text on a veil of the plot's background, readable over a curve."""

    def __init__(self, parent: QGraphicsItem, background: QColor) -> None:
        super().__init__(parent)
        self.background = background

    def paint(self, painter: QPainter, option: Any, widget: Any = None) -> None:
        painter.fillRect(self.boundingRect(), self.background)
        super().paint(painter, option, widget)


class LineLabels:
    """The labels of the lines across the plots, drawn as plain text in `box` (the RAM plot's
    view box) where place_labels puts them: laid out again when the labels, the time range or
    the box's size change, at most once for each change, for a bounded number of labels."""

    def __init__(self, box: pg.ViewBox) -> None:
        self.box = box
        self.entries: list[LineLabel] = []
        self._items: list[LabelText] = []
        self._background = QColor(255, 255, 255)
        self._font = QFont()
        self._metrics = QFontMetricsF(self._font)
        self._widths: dict[str, float] = {}
        self._laid_out: tuple[Any, ...] = ()
        box.sigXRangeChanged.connect(self.lay_out)
        box.sigResized.connect(self.lay_out)

    def set_entries(self, entries: list[LineLabel]) -> None:
        self.entries = entries
        self._laid_out = ()
        self.lay_out()

    def set_background(self, color: QColor) -> None:
        """The plot's background, behind each label: opaque, so a line that crosses a label
        (a census line through the exit's, say) stops at it rather than through its text;
        the labels are in a band of their own above the curves, which they never cover."""
        self._background = QColor(color)
        self._background.setAlpha(255)
        for item in self._items:
            item.background = self._background
            item.update()
        self._laid_out = ()  # the labels' colours are chosen for the background
        self.lay_out()

    def lay_out(self, *_: Any) -> None:
        (low, high), _y = self.box.viewRange()
        width, height = float(self.box.width()), float(self.box.height())
        key = (low, high, width, height)  # set_entries and set_background clear it
        if key == self._laid_out:
            return
        self._laid_out = key
        scale = width / (high - low) if high > low else 0.0
        in_view = []
        for label in sorted(self.entries, key=lambda entry: entry.t):
            x = (label.t - low) * scale
            if 0.0 <= x <= width:  # a line out of view has no label
                in_view.append((x, label))
        line_height = math.ceil(self._metrics.height()) + 1  # a text item's box is whole pixels
        rows = int((height - 2 * LABEL_EDGE) // line_height)
        placements = place_labels(in_view, width, rows, self._width, self._elide)
        while len(self._items) < len(placements):
            item = LabelText(self.box, self._background)
            item.setFont(self._font)
            item.setZValue(20)  # over the curves and the lines
            item.setAcceptedMouseButtons(Qt.MouseButton.NoButton)  # a drag pans, as elsewhere
            self._items.append(item)
        for item, placement in zip(self._items, placements, strict=False):
            top = LABEL_EDGE + placement.row * line_height
            if item.text() != placement.text:
                item.setText(placement.text)
            item.setBrush(readable(QColor(placement.color), self._background))
            item.setPos(placement.left, top)
            item.show()
        for item in self._items[len(placements) :]:
            item.hide()
        # The labels get a band of their own above the curves (HeadroomViewBox).
        used = [placement.row for placement in placements]
        if isinstance(self.box, HeadroomViewBox):
            band = LABEL_EDGE + (max(used) + 1) * line_height if used else 0.0
            self.box.set_headroom(band)

    def _width(self, text: str) -> float:
        width = self._widths.get(text)
        if width is None:
            if len(self._widths) > 4 * MAX_EVENT_LINES:
                self._widths.clear()  # texts of views long gone
            width = self._widths[text] = self._metrics.horizontalAdvance(text)
        return width

    def _elide(self, text: str, width: float) -> str:
        return self._metrics.elidedText(text, Qt.TextElideMode.ElideRight, width)


class EventLane:
    """The lane plot (row `row` of `graphics`) and the lines it draws across `ram_plot` and
    `gpu_plot`, redrawn from a Profile by refresh()."""

    def __init__(
        self,
        graphics: pg.GraphicsLayoutWidget,
        row: int,
        ram_plot: pg.PlotItem,
        gpu_plot: pg.PlotItem,
    ) -> None:
        self.ram_plot = ram_plot
        self.gpu_plot = gpu_plot
        self.profile: Profile | None = None
        # The spans table of the last frame and its length then.
        self._spans_key: tuple[SampleTable, int] | None = None
        self.plot = graphics.addPlot(row=row, col=0, axisItems={"bottom": SecondsAxis("bottom")})
        self.plot.setMaximumHeight(70)
        without_si_prefix(self.plot)
        self.plot.getAxis("left").setWidth(72)
        self.plot.setMouseEnabled(x=True, y=False)
        self.plot.getAxis("left").setStyle(showValues=False, tickLength=0)
        self.plot.getAxis("left").setPen(pg.mkPen(None))
        self.plot.setYRange(0, 3, padding=0)
        self.plot.getAxis("bottom").setLabel("time since start")

        self.steps = pg.PlotCurveItem(pen=pg.mkPen(COLORS["iteration"], width=1), connect="pairs")
        self.epochs = pg.PlotCurveItem(pen=pg.mkPen(COLORS["epoch"], width=2), connect="pairs")
        self.forward = pg.BarGraphItem(
            x0=[], x1=[], y0=1.15, height=0.7, brush=COLORS["forward"], pen=None
        )
        self.backward = pg.BarGraphItem(
            x0=[], x1=[], y0=1.15, height=0.7, brush=COLORS["backward"], pen=None
        )
        self.marks = pg.ScatterPlotItem(size=11, hoverable=True, tip=mark_tip)
        for item in (self.steps, self.epochs, self.forward, self.backward, self.marks):
            self.plot.addItem(item)
        # Lines across the plots: at errors and the exit, and at the censuses marked.
        self.lines: list[tuple[pg.PlotItem, pg.InfiniteLine]] = []
        self.time_marks: list[tuple[pg.PlotItem, pg.InfiniteLine]] = []
        self.labels = LineLabels(ram_plot.getViewBox())
        self._line_labels: list[LineLabel] = []  # of the lines at errors and the exit
        self._mark_labels: list[LineLabel] = []  # of the censuses marked
        self._counts = (-1, -1, -1, -1)
        self.plot.getViewBox().sigXRangeChanged.connect(self._on_range_changed)

    def refresh(self, profile: Profile, job: Profile | None, force: bool = False) -> None:
        """Draw `profile`'s iterations, phases and events where they changed (`force`: all of
        them again); `job`: the whole job shown, whose other processes' errors are marked."""
        self.profile = profile
        steps, spans = profile.steps, profile.spans
        counts = (
            len(steps) if steps is not None else 0,
            len(spans) if spans is not None else 0,
            len(profile.events),
            event_count(job) if job is not None else 0,
        )
        if counts == self._counts and not force:
            return
        self._counts = counts
        self._draw_steps()
        epochs = [e for e in profile.events if e.type == "epoch"]
        self.epochs.setData(np.repeat([e.t for e in epochs], 2), np.tile([0.0, 3.0], len(epochs)))
        self._draw_spans()
        self._draw_events(profile, job)

    def mark_times(self, marks: list[tuple[float, str]]) -> None:
        """Dashed lines across the plots at these times, each labelled on the RAM plot;
        [] removes them."""
        for plot, line in self.time_marks:
            plot.removeItem(line)
        self.time_marks = []
        pen = pg.mkPen(CENSUS_COLOR, width=1.5, style=Qt.PenStyle.DashLine)
        for t, _label in marks:
            for plot in (self.ram_plot, self.gpu_plot, self.plot):
                line = pg.InfiniteLine(pos=t, angle=90, movable=False, pen=pen)
                plot.addItem(line, ignoreBounds=True)
                self.time_marks.append((plot, line))
        self._mark_labels = [
            LineLabel(t, shorten(label, MAX_LABEL), CENSUS_COLOR, census=True)
            for t, label in marks
            if label
        ]
        self.labels.set_entries(self._line_labels + self._mark_labels)

    # -- drawing --------------------------------------------------------------------------------

    def _on_range_changed(self, *_: Any) -> None:
        self._draw_spans()
        self._draw_steps()

    def _draw_steps(self) -> None:
        steps = self.profile.steps if self.profile is not None else None
        if steps is None:
            self.steps.setData([], [])
            return
        low, high = self.plot.getViewBox().viewRange()[0]
        t = steps.t[int(np.searchsorted(steps.t, low)) : int(np.searchsorted(steps.t, high))]
        if len(t) > MAX_STEPS_DRAWN:
            t = t[:0]  # too dense to tell apart: zoom in to see iterations
        self.steps.setData(np.repeat(t, 2), np.tile([0.1, 0.9], len(t)))

    def _draw_spans(self) -> None:
        spans = self.profile.spans if self.profile is not None else None
        if spans is None:
            self.forward.setOpts(x0=[], x1=[])
            self.backward.setOpts(x0=[], x1=[])
            return
        low, high = self.plot.getViewBox().viewRange()[0]
        # A table that has not grown since the last frame is indexed once (a finished
        # profile; one read behind its overview comes indexed: spanindex.span_index); one
        # still growing (a live run) is searched by a pass over it instead of being sorted
        # again on every frame.
        # The table itself is kept, not its id: an id may be reused by the next profile's.
        stable = (
            self._spans_key is not None
            and self._spans_key[0] is spans
            and self._spans_key[1] == len(spans)
        )
        self._spans_key = (spans, len(spans))
        for kind, item in zip(PHASE_KINDS, (self.forward, self.backward), strict=True):
            index = span_index(spans, kind) if stable else ready_span_index(spans, kind)
            # (An index counts the spans in view first: a wide view gathers none.)
            if index is None or index.count(low, high) <= MAX_SPANS_DRAWN:
                starts, ends = (
                    index.overlapping(low, high)
                    if index is not None
                    else spans_overlapping(spans, kind, low, high)
                )
                if len(starts) <= MAX_SPANS_DRAWN:
                    item.setOpts(x0=starts, x1=ends)
                    continue
            item.setOpts(x0=[], x1=[])  # zoom in to see phases

    def _draw_events(self, profile: Profile, job: Profile | None) -> None:
        for plot, line in self.lines:
            plot.removeItem(line)
        self.lines = []
        self._line_labels = []
        spots: list[dict[str, Any]] = []
        seen: set[int] = set()  # the exceptions marked: each once, at its first sighting
        for event in profile.events:
            if len(spots) >= MAX_EVENT_MARKS and event.type != "exit":
                continue
            if later_sighting(event, seen):
                continue
            if event.type == "exception":
                oom = event.get("oom")
                label = event_label(event.type, event.get("exc_type"), bool(oom))
                spots.append(
                    {"pos": (event.t, 2.4), "symbol": "t", "brush": COLORS["error"], "data": label}
                )
                if oom or event.get("uncaught"):
                    self._add_line(event.t, label, COLORS["error"])
            elif event.type == "oom_observed":
                spots.append(
                    {
                        "pos": (event.t, 2.4),
                        "symbol": "t",
                        "brush": COLORS["error"],
                        "data": "OOM (allocator)",
                    }
                )
            elif event.type == "exit":
                label = f"exit: {profile.info.ended_by}"
                spots.append(
                    {"pos": (event.t, 2.4), "symbol": "s", "brush": COLORS["exit"], "data": label}
                )
                self._add_line(event.t, label, COLORS["exit"])
        if job is not None:
            # The other processes' errors, named by rank, on the same lane.
            for mark in process_marks(job, max(0, MAX_EVENT_MARKS - len(spots))):
                spots.append(
                    {
                        "pos": (mark.t, 2.4),
                        "symbol": "t",
                        "brush": COLORS["error"],
                        "data": mark.label,
                    }
                )
                if mark.line:
                    self._add_line(mark.t, mark.line_label, COLORS["error"])
        self.marks.setData(spots)
        self.labels.set_entries(self._line_labels + self._mark_labels)

    def _add_line(self, t: float, label: str, color: str) -> None:
        if len(self.lines) >= 2 * MAX_EVENT_LINES:  # two plots: a line on each
            return
        for plot in (self.ram_plot, self.gpu_plot):
            line = pg.InfiniteLine(pos=t, angle=90, pen=pg.mkPen(color, width=1.5))
            plot.addItem(line, ignoreBounds=True)
            self.lines.append((plot, line))
        self._line_labels.append(LineLabel(t, shorten(label, MAX_LABEL), color))
