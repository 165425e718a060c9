"""The event lane under the timeline's plots, and the lines it draws across them.

The lane shows iterations, epochs, forward and backward phases, and a mark at each error and at
the exit; an OOM, an uncaught error and the exit also get a line across the RAM and GPU plots,
labelled on the RAM plot, as do the censuses the contents panel shows (mark_times). The lane
owns its plot; the TimelineView links the plots' time axes to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from app.axes import SecondsAxis
from app.jobview import event_count, event_label, later_sighting, process_marks
from app.plaintext import line_label, tooltip
from profiler import protocol
from profiler.profile.model import Profile
from profiler.profile.series import MARK_COLORS

MAX_SPANS_DRAWN = 1500
MAX_EVENT_LINES = 50  # lines across the plots at errors and the exit; the rest are marks only
MAX_EVENT_MARKS = 2000  # marks in the event lane (and the exit's): a hostile file may hold millions
MAX_STEPS_DRAWN = 3000  # iteration ticks are drawn when this few are in view

# Marks take their colours from profiler.profile.series, shared with the report.
COLORS = MARK_COLORS
CENSUS_COLOR = "#8e44ad"  # the census the contents panel shows: apart from every other mark


def mark_tip(x: float, y: float, data: Any) -> str:
    """A lane mark's tooltip: what happened, and when."""
    return tooltip(f"{data}\nat {x:.3f} s")


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
        self.plot = graphics.addPlot(row=row, col=0, axisItems={"bottom": SecondsAxis("bottom")})
        self.plot.setMaximumHeight(70)
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
        for t, label in marks:
            for plot in (self.ram_plot, self.gpu_plot, self.plot):
                line = pg.InfiniteLine(
                    pos=t,
                    angle=90,
                    movable=False,
                    pen=pen,
                    label=line_label(label) if plot is self.ram_plot and label else None,
                    # Low on the plot, left of the line: growth puts the curves high late on.
                    labelOpts={
                        "position": 0.1,
                        "color": CENSUS_COLOR,
                        "anchors": [(1, 1), (1, 1)],
                    },
                )
                plot.addItem(line, ignoreBounds=True)
                self.time_marks.append((plot, line))

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
        visible = (spans["end"] >= low) & (spans["t"] <= high)
        for kind, item in (
            (protocol.SPAN_FORWARD, self.forward),
            (protocol.SPAN_BACKWARD, self.backward),
        ):
            mask = (
                visible
                & (spans["kind"] == kind)
                & ((spans["depth"] == 0) | (kind != protocol.SPAN_FORWARD))
            )
            if int(mask.sum()) > MAX_SPANS_DRAWN:
                item.setOpts(x0=[], x1=[])  # zoom in to see phases
                continue
            item.setOpts(x0=spans["t"][mask], x1=spans["end"][mask])

    def _draw_events(self, profile: Profile, job: Profile | None) -> None:
        for plot, line in self.lines:
            plot.removeItem(line)
        self.lines = []
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

    def _add_line(self, t: float, label: str, color: str) -> None:
        if len(self.lines) >= 2 * MAX_EVENT_LINES:  # two plots: a line on each
            return
        for plot in (self.ram_plot, self.gpu_plot):
            line = pg.InfiniteLine(
                pos=t,
                angle=90,
                pen=pg.mkPen(color, width=1.5),
                label=line_label(label) if plot is self.ram_plot else None,
                labelOpts={"position": 0.92, "color": color, "anchors": [(1, 0), (1, 0)]},
            )
            plot.addItem(line, ignoreBounds=True)
            self.lines.append((plot, line))
