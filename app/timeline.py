"""Timeline view: RAM plot, GPU plot and an event lane, on one linked time axis.

The view owns its pyqtgraph widgets and redraws from a Profile (model/view pair: Profile ↔
TimelineView). refresh() is cheap when nothing changed and is called by the window's timer,
never from recorder threads. Long runs stay fast because curves are clipped to the visible
range and decimated with min/max per pixel ("peak" downsampling), so a spike never vanishes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from memsight.app.axes import ByteAxis, blend, time_label, without_si_prefix
from memsight.app.curvepoints import CurvePoints
from memsight.app.eventlane import EventLane
from memsight.app.jobview import (
    WHOLE_JOB,
    JobCurves,
    choice_label,
    job_order,
    peak_label,
    rss_label,
)
from memsight.app.maincurves import (
    GPU_SERIES,
    OWN_RAM_SERIES,
    RAM_SERIES,
    PreparedCurves,
    take_in_gpu,
    take_in_ram,
)
from memsight.app.plaintext import line_label
from memsight.app.plotting import (
    Curve,
    HeadroomViewBox,
    make_curve,
    make_legend,
    paint_labels,
    set_entries,
)
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import (
    BEFORE_ALLOCATED,
    BEFORE_TREE,
    MAIN_PEAK,
    MAIN_RSS,
    PROCESS_TREE,
    Series,
    memory_name,
    process_tree_bytes,
)
from memsight.profiler.units import format_bytes

FOLLOW_WINDOW_S = 60.0

# The view's own moves leave this fraction of the range free at each side, so the first and
# last points are not drawn on the frame.
EDGE_PADDING = 0.01

# The whole job's total: the target's process tree holds every process of the job.
JOB_TREE_LABEL = "Whole job (tree)"

# What the plot says while there is nothing to draw.
NO_RUN_TEXT = "Open a script or drop it here, then Run"
WAITING_TEXT = "Waiting for the first sample…"
NO_SAMPLES_TEXT = "This run recorded no memory samples"
DAMAGED_NO_SAMPLES_TEXT = "No memory sample could be read from this damaged file"


class TimelineView(QWidget):
    """RAM and GPU timelines with markers; emits followChanged when the user takes over."""

    followChanged = Signal(bool)
    # The process of a job now drawn (its Profile) after the user or a finding chose it.
    processChosen = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # The run as opened (a job: the target and its other processes), and the process
        # whose curves, marks and phases are drawn: the target, or the one chosen.
        self.job: Profile | None = None
        self.profile: Profile | None = None
        self.selected: int | None = None  # None: the whole job, the others overlaid
        # Another run overlaid for comparison (File > Compare With...), on this run's axis.
        self.other: Profile | None = None
        self.other_curves: list[tuple[pg.PlotItem, Curve]] = []
        self.follow = True
        self.running = False
        self._programmatic_range = False
        self._gpu_device: int | None = None
        self._levels_built = False
        self._prepared: PreparedCurves | None = None
        self._limit_lines: list[tuple[pg.PlotItem, pg.InfiniteLine]] = []
        self._limits_key: tuple[Any, ...] = ()
        self._highlights: list[tuple[pg.PlotItem, pg.LinearRegionItem]] = []

        self.readout = QLabel(" ")
        self.readout.setTextFormat(Qt.TextFormat.PlainText)
        # A long readout is cut, never widens the timeline: the docks beside it keep their size.
        self.readout.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.readout.setMinimumWidth(0)
        self.readout.setObjectName("readout")
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.ci.setSpacing(2)
        # A job's processes: the whole job (each process' RSS overlaid), or one alone.
        self.process_choice = QComboBox()
        self.process_choice.setToolTip("Show the whole job, or one process of it alone")
        self.process_choice.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.process_choice.hide()
        self.process_choice.currentIndexChanged.connect(self._on_process_chosen)
        top = QHBoxLayout()
        top.setContentsMargins(6, 0, 6, 0)  # the readout clear of the window's edge
        top.addWidget(self.readout, 1)
        top.addWidget(self.process_choice)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addWidget(self.graphics, 1)

        self.ram_plot = self._make_plot(memory_name("ram", None), row=0)
        self.gpu_plot = self._make_plot("GPU memory", row=1)
        # Iterations, phases and events, and the lines at errors and censuses (app/eventlane.py).
        self.event_lane = EventLane(self.graphics, 2, self.ram_plot, self.gpu_plot)
        self.lane = self.event_lane.plot
        self.marks = self.event_lane.marks
        for plot in (self.ram_plot, self.gpu_plot):
            plot.setXLink(self.lane)
            # The lane's axis below tells the time; a second tick row above it, redrawn at
            # every frame as the range follows the run, would cost a paint of its own.
            plot.hideAxis("bottom")

        # Drawn in this order: the main curves on top of their peaks and the tree.
        self._main_series: tuple[tuple[pg.PlotItem, Series], ...] = (
            *((self.ram_plot, series) for series in RAM_SERIES),
            *((self.gpu_plot, series) for series in GPU_SERIES),
        )
        self.curves = {s.key: Curve(make_curve(plot, s)) for plot, s in self._main_series}
        # The whole job: each process' RSS and GPU memory side by side (app/jobview.py).
        self.job_curves = JobCurves(self.ram_plot, self.gpu_plot)
        self._choices: list[tuple[int, str]] = []  # the selector's entries (process, text)
        # A run without CUDA has no GPU plot at all: the RAM plot gets its room.
        self.gpu_shown = True
        self._empty_shown = False
        self._whole_job_drawn = False  # the main process' own curves are not drawn, the job's are
        # What to do, where a run's curves will be, until there is one.
        self.empty = pg.TextItem(NO_RUN_TEXT, anchor=(0.5, 0.5))
        self.ram_plot.addItem(self.empty, ignoreBounds=True)

        # Connected after the plots are linked to the lane: this handler runs after theirs, so
        # a finished run's curves skip pyqtgraph's own rebuild for a new x range (CurveItem).
        self.lane.getViewBox().sigXRangeChanged.connect(self._on_range_changed)

        self.crosshairs = [
            pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#888", width=1))
            for _ in range(3)
        ]
        for plot, line in zip(
            (self.ram_plot, self.gpu_plot, self.lane), self.crosshairs, strict=True
        ):
            plot.addItem(line, ignoreBounds=True)
            line.hide()
        self.graphics.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.apply_palette(self.palette())
        self.refresh()  # the empty state, until a run is shown

    def _make_plot(self, title: str, row: int) -> pg.PlotItem:
        axis = ByteAxis("left")
        # Room for "1023 MiB" from the start: an axis laid out narrower than its labels
        # drops them, and the RAM and GPU plots line up when both are this wide.
        axis.setWidth(72)
        plot = self.graphics.addPlot(
            row=row, col=0, axisItems={"left": axis}, viewBox=HeadroomViewBox()
        )
        plot.showGrid(x=False, y=True, alpha=0.15)
        without_si_prefix(plot)
        # Below the data (pyqtgraph puts axes above it): the curves cross the opaque grid.
        axis.setZValue(-200)
        plot.setMouseEnabled(x=True, y=False)
        plot.enableAutoRange(axis="y")
        plot.setAutoVisible(y=True)
        make_legend(plot, title)  # the title, then the curves' names, above the data
        plot.getViewBox().sigRangeChangedManually.connect(self._on_manual_range)
        return plot

    # -- public API ---------------------------------------------------------------------------

    def set_profile(
        self,
        profile: Profile | None,
        running: bool = False,
        prepared: PreparedCurves | None = None,
    ) -> None:
        """Show `profile` (None: no run), growing while `running`. `prepared`: its main curves
        made ready in a worker thread (maincurves.prepare_curves), adopted instead of taking
        a finished day-long run's rows in here."""
        self._prepared = prepared if prepared is not None and prepared.profile is profile else None
        self.clear_highlight()
        self.mark_times([])
        self.set_comparison(None)
        # Nothing of the run shown before: its hover readout and crosshair.
        self.readout.setText(" ")
        for line in self.crosshairs:
            line.hide()
        self.job = self.profile = profile
        self.selected = None
        self._choices = []
        # A curve hidden from the legend was hidden in the run shown before: each run starts
        # with every curve shown.
        for curve in self.curves.values():
            curve.item.show()
        for plot in (self.ram_plot, self.gpu_plot):
            paint_labels(plot.legend)
        self.running = running
        self.follow = True
        self._redraw()
        if not running:
            self.zoom_to_fit()

    def select_process(self, proc: int | None) -> None:
        """Draw process `proc` of the job alone (0: the target), or the whole job (None)."""
        job = self.job
        if job is None or proc == self.selected:
            return
        if proc is not None and proc != 0 and proc not in job.subprocesses:
            return
        self.selected = proc
        self.profile = job if proc in (None, 0) else job.subprocesses[proc]
        index = self.process_choice.findData(WHOLE_JOB if proc is None else proc)
        if index >= 0 and index != self.process_choice.currentIndex():
            self.process_choice.blockSignals(True)
            self.process_choice.setCurrentIndex(index)
            self.process_choice.blockSignals(False)
        self._redraw()
        self.processChosen.emit(self.profile)

    def _redraw(self) -> None:
        """Every curve and mark again, from the shown profile's first row."""
        for curve in self.curves.values():
            curve.reset()
        self.job_curves.clear()
        self._gpu_device = None
        prepared = self._prepared
        if prepared is not None and prepared.profile is self.profile and not self.running:
            for key, points in prepared.points.items():
                self.curves[key].adopt(points)
            self._gpu_device = prepared.device
        self.refresh(force=True)
        if not self.running:
            self._build_levels()
            self._on_range_changed()  # what is in view, drawn from the levels

    def set_running(self, running: bool, whole_run: bool = False) -> None:
        """`whole_run`: the run has ended, show all of it; each curve is drawn once, for that
        view (not for the view that followed the run, and then again)."""
        self.running = running
        if not running:
            self.refresh()  # only what arrived last: the curves already hold the rest
            for curve in self._all_curves():
                curve.live_from = -np.inf  # the whole run, thinned by its levels from now on
                # ... handed by _on_range_changed, which pyqtgraph's own rebuild would precede
                curve.item.range_driven = True
            self._levels_built = False
            if whole_run:
                followed = self.x_range()
                self.zoom_to_fit()  # the range change draws the curves from their levels
                if self.x_range() != followed:
                    return
            self._on_range_changed()  # levels built, and what is in view drawn from them

    def set_follow(self, follow: bool) -> None:
        if follow != self.follow:
            self.follow = follow
            self.followChanged.emit(follow)
        if follow:
            self._apply_follow()

    def zoom_to_fit(self) -> None:
        if self.profile is None:
            return
        end = max(self.profile.duration, 1e-3)
        self.set_x_range(0.0, end, padding=EDGE_PADDING)

    def x_range(self) -> tuple[float, float]:
        """The times at the view's left and right edges, in seconds."""
        low, high = self.lane.getViewBox().viewRange()[0]
        return float(low), float(high)

    def set_x_range(self, low: float, high: float, padding: float = 0.0) -> None:
        """Show the times from `low` to `high`, exactly by default (a view kept from before);
        the view's own moves pad by a hair so the first and last points are not on the edge."""
        self._programmatic_range = True
        try:
            self.lane.setXRange(low, high, padding=padding)
        finally:
            self._programmatic_range = False

    def highlight(self, start: float, end: float, plot: str | None) -> None:
        """Shade a finding's evidence span (strongest on its own plot) and bring it into view."""
        self.clear_highlight()
        if self.profile is None:
            return
        end = max(end, start + 1e-3)
        for name, item in (("ram", self.ram_plot), ("gpu", self.gpu_plot), (None, self.lane)):
            alpha = 70 if plot is None or name == plot else 30
            region = pg.LinearRegionItem(
                (start, end),
                movable=False,
                brush=pg.mkBrush(240, 170, 40, alpha),
                pen=pg.mkPen(None),
            )
            region.setZValue(-10)
            item.addItem(region, ignoreBounds=True)
            self._highlights.append((item, region))
        if self.running:
            self.set_follow(False)
        margin = max((end - start) * 0.15, 0.05)
        self.set_x_range(max(0.0, start - margin), end + margin, padding=EDGE_PADDING)

    def clear_highlight(self) -> None:
        for item, region in self._highlights:
            item.removeItem(region)
        self._highlights = []

    def mark_times(self, marks: list[tuple[float, str]], reveal: bool = False) -> None:
        """Dashed lines across the plots at these times (the census the contents panel shows
        and the one it compares with), each labelled on the RAM plot; [] removes them.
        `reveal` pans to the first when it is out of view, keeping the zoom: the user chose
        it, so it must be seen."""
        self.event_lane.mark_times(marks if self.profile is not None else [])
        if not marks or self.profile is None:
            return
        t = marks[0][0]
        low, high = self.lane.getViewBox().viewRange()[0]
        if not reveal or low <= t <= high:
            return
        if self.running:
            self.set_follow(False)
        start = max(0.0, t - (high - low) / 2)
        self.set_x_range(start, start + (high - low), padding=EDGE_PADDING)

    def refresh(self, force: bool = False) -> None:
        profile = self.profile
        if profile is None:
            for curve in self.curves.values():
                curve.reset()
            self.job_curves.clear()
            self._show_gpu(False)
            self._show_empty(NO_RUN_TEXT)
            self.process_choice.hide()
            return
        # A run's first sample comes a moment after it starts: until then the plot shows that
        # it waits, never the run shown before (its y range stays with an empty curve).
        sampled = profile.ram is not None and len(profile.ram) > 0
        if sampled:
            self._show_empty(None)
        elif self.running:
            self._show_empty(WAITING_TEXT)
        else:
            self._show_empty(DAMAGED_NO_SAMPLES_TEXT if profile.damaged else NO_SAMPLES_TEXT)
        if not force and self.whole_job and not self._whole_job_drawn:
            # A live run became a job (its first rank or spawned process connected): the main
            # process' own curves give way to each process' curve, which the legend names.
            for series in OWN_RAM_SERIES:
                self.curves[series.key].reset()
        self._whole_job_drawn = self.whole_job
        self._sync_process_choice()
        following = self.running and self.follow
        # Following the run, the view moves first and the new points are drawn for it: each
        # curve's display data is rebuilt once, by its new points (or at the end, without).
        waiting = [curve.item for curve in self._all_curves()] if following else []
        for item in waiting:
            item.waits = True
        try:
            if following:
                self._apply_follow()
                self._trim_live()
            self._refresh_ram(profile)
            if self.whole_job and self.job is not None:
                self.job_curves.refresh(self.job)
                self._show_gpu(self.job_curves.uses_gpu(self.job))
            else:
                self._refresh_gpu(profile)
        finally:
            for item in waiting:
                item.end_wait()
        self._sync_legends()
        self._limits(profile)
        self.event_lane.refresh(profile, self.job if self.whole_job else None, force)
        # What pyqtgraph leaves to the paint (the auto range of y) done now: done in the
        # paint, it moves the view and asks for a second paint of the whole plot area.
        self.graphics.scene().prepareForPaint()

    @property
    def whole_job(self) -> bool:
        """A job shown whole: each process' curves side by side, the target's tree above."""
        return self.job is not None and bool(self.job.subprocesses) and self.selected is None

    @property
    def process_curves(self) -> dict[int, Curve]:
        """Each process' RSS curve of the whole-job view, by process number."""
        return self.job_curves.ram

    # -- drawing --------------------------------------------------------------------------------

    def _refresh_ram(self, profile: Profile) -> None:
        extended = take_in_ram(self._points(), profile.ram, self.whole_job)
        self._show_live(extended)

    def _points(self) -> dict[str, CurvePoints]:
        return {key: curve.points for key, curve in self.curves.items()}

    def _show_live(self, keys: list[str]) -> None:
        """Hand these main curves' new points to pyqtgraph while a run goes on; a finished
        run is drawn from its levels (_redraw)."""
        if self.running:
            for key in keys:
                self.curves[key].show_live()

    def _main_label(self, series: Series) -> str:
        """A main curve's label: a process of a job drawn alone names itself."""
        profile = self.profile
        if profile is None or self.job is None or not self.job.subprocesses:
            return series.label
        if series is MAIN_RSS:
            return rss_label(profile)
        if series is MAIN_PEAK:
            return peak_label(profile)
        return series.label

    def _sync_legends(self) -> None:
        """Each legend lists the curves this view draws, under the names it gives them."""
        entries: dict[int, list[tuple[pg.PlotDataItem, str]]] = {
            id(self.ram_plot): [],
            id(self.gpu_plot): [],
        }
        if self.whole_job and self.job is not None:
            ram, gpu = self.job_curves.entries(self.job)
            tree = (self.curves[PROCESS_TREE.key].item, JOB_TREE_LABEL)
            entries[id(self.ram_plot)] += [tree, *ram]
            entries[id(self.gpu_plot)] += gpu
        else:
            for plot, series in self._main_series:
                item = self.curves[series.key].item
                entries[id(plot)].append((item, self._main_label(series)))
        for plot, curve in self.other_curves:
            entries[id(plot)].append((curve.item, curve.item.name() or ""))
        for plot in (self.ram_plot, self.gpu_plot):
            set_entries(plot, entries[id(plot)])

    def _sync_process_choice(self) -> None:
        """The selector lists the job's processes as they appear (a live job grows, and a
        process is named by its rank once it has one)."""
        job = self.job
        processes = job_order(job) if job is not None and job.subprocesses else []
        self.process_choice.setVisible(bool(processes))
        choices = [(p.process.proc, choice_label(p)) for p in processes]
        if choices == self._choices:
            return
        self._choices = choices
        self.process_choice.blockSignals(True)
        self.process_choice.clear()
        if choices:
            self.process_choice.addItem("Whole job", WHOLE_JOB)
        for number, text in choices:
            self.process_choice.addItem(text, number)
        index = self.process_choice.findData(WHOLE_JOB if self.selected is None else self.selected)
        self.process_choice.setCurrentIndex(max(0, index))
        self.process_choice.blockSignals(False)

    def _on_process_chosen(self, index: int) -> None:
        data = self.process_choice.itemData(index)
        if isinstance(data, int):
            self.select_process(None if data == WHOLE_JOB else data)

    def _refresh_gpu(self, profile: Profile) -> None:
        self._show_gpu(profile.gpu is not None)
        self._gpu_device, extended = take_in_gpu(self._points(), profile, self._gpu_device)
        self._show_live(extended)

    def _show_gpu(self, used: bool) -> None:
        """The GPU plot is in the layout only while the shown run uses CUDA (a live run's
        appears when the script initialises it)."""
        if used == self.gpu_shown:
            return
        self.gpu_shown = used
        if used:
            self.graphics.ci.addItem(self.gpu_plot, row=1, col=0)
            self.gpu_plot.enableAutoRange(axis="y")
        else:
            self.graphics.ci.removeItem(self.gpu_plot)

    def _show_empty(self, message: str | None) -> None:
        """Nothing to draw (no run yet, or no sample of it): `message` in the middle, and no
        byte axis counting from nothing. None: the run's samples."""
        empty = message is not None
        if message is not None and message != self.empty.textItem.toPlainText():
            self.empty.setText(message)
        if empty == self.empty.isVisible() and empty == self._empty_shown:
            return
        self._empty_shown = empty
        self.empty.setVisible(empty)
        self.ram_plot.getAxis("left").setStyle(showValues=not empty)
        if empty:
            self.ram_plot.setYRange(0, 1, padding=0)
            low, high = self.ram_plot.getViewBox().viewRange()[0]
            self.empty.setPos(QPointF((low + high) / 2, 0.5))
        else:
            self.ram_plot.enableAutoRange(axis="y")  # the fixed range was the message's

    def _limits(self, profile: Profile) -> None:
        """Dashed lines at system RAM, the cgroup limit and each device's capacity."""
        info = profile.info
        limits = [(info.ram_total_bytes, "system RAM", self.ram_plot)]
        if info.memory_limit_bytes and (info.ram_total_bytes or 0) > info.memory_limit_bytes:
            limits.append((info.memory_limit_bytes, "memory limit (cgroup)", self.ram_plot))
        for device in info.devices:
            limits.append((device.total_bytes, f"{device.name} capacity", self.gpu_plot))
        key = tuple((value, label) for value, label, _ in limits)
        if key == self._limits_key:
            return
        self._limits_key = key
        for plot, line in self._limit_lines:
            plot.removeItem(line)
        self._limit_lines = []
        for value, label, plot in limits:
            if not value:
                continue
            line = pg.InfiniteLine(
                pos=float(value),
                angle=0,
                pen=pg.mkPen("#888", width=1, style=Qt.PenStyle.DashLine),
                label=line_label(f"{label} {format_bytes(value)}"),
                labelOpts={"position": 0.02, "color": "#888", "anchors": [(0, 1), (0, 1)]},
            )
            plot.addItem(line, ignoreBounds=True)
            self._limit_lines.append((plot, line))

    # -- interaction ------------------------------------------------------------------------

    def _apply_follow(self) -> None:
        if self.profile is None:
            return
        end = self.profile.duration
        self.set_x_range(max(0.0, end - FOLLOW_WINDOW_S), max(end, 1.0), padding=EDGE_PADDING)

    def _on_manual_range(self, *_: Any) -> None:
        if self.running and not self._programmatic_range:
            self.set_follow(False)

    def _on_range_changed(self, *_: Any) -> None:
        low, high = self.lane.getViewBox().viewRange()[0]
        if self.empty.isVisible():
            self.empty.setPos(QPointF((low + high) / 2, 0.5))  # keep the message centred
        if self.running:
            if not self._programmatic_range:  # the user's pan or zoom; following trims itself
                self._clip_live(low, high)
            return
        if not self._levels_built:
            self._build_levels()
        low, high = self.lane.getViewBox().viewRange()[0]
        pixels = int(self.lane.getViewBox().width()) or 1000
        for curve in self._all_curves():
            curve.show_range(low, high, pixels)

    def _trim_live(self) -> None:
        """Following a run: hand the curves only the points from just before the view on.
        Set once the view has moved and before the new rows are taken in, so the update that
        takes them in is the only one this frame."""
        low, high = self.lane.getViewBox().viewRange()[0]
        start = low - 0.05 * (high - low)
        per_pixel = self._seconds_per_pixel(low, high)
        for curve in self._all_curves():
            curve.live_from = max(curve.live_from, start)
            curve.live_seconds_per_pixel = per_pixel

    def _clip_live(self, low: float, high: float) -> None:
        """The user moved the view of a running run: hand the curves' points from one view's
        width before it on, at once when it moved back, and dropping the oldest two views'
        widths at a time when it moved ahead."""
        span = high - low
        wanted = low - span
        per_pixel = self._seconds_per_pixel(low, high)
        for curve in self._all_curves():
            # Zoomed (not panned): the samples per pixel, and so what the curve is handed, change.
            zoomed = not np.isclose(per_pixel, curve.live_seconds_per_pixel, rtol=0.1)
            if zoomed or wanted < curve.live_from or wanted - curve.live_from > 2 * span:
                curve.clip_live(wanted, per_pixel)

    def _seconds_per_pixel(self, low: float, high: float) -> float:
        """Of the view from `low` to `high`: how many seconds a pixel of the plots holds."""
        return float((high - low) / max(1.0, self.lane.getViewBox().width()))

    def _all_curves(self) -> list[Curve]:
        others = [curve for _plot, curve in self.other_curves]
        return [*self.curves.values(), *self.job_curves.curves(), *others]

    def set_comparison(
        self, other: Profile | None, place: Callable[[np.ndarray], np.ndarray] | None = None
    ) -> None:
        """Overlay `other` (another run of the script) on every plot, its times put on this
        run's axis by `place` (comparison.aligned_times: by iteration); None: stop."""
        for plot, curve in self.other_curves:
            plot.removeItem(curve.item)
            if plot.legend is not None:
                plot.legend.removeItem(curve.item)
        self.other_curves = []
        self.other = other
        if other is None:
            return
        at = place if place is not None else (lambda t: t)
        ram = other.ram
        if ram is not None and len(ram):
            self._add_other(self.ram_plot, BEFORE_TREE, at(ram.t), process_tree_bytes(ram))
        gpu = other.gpu
        if gpu is not None:
            device = self._gpu_device if self._gpu_device is not None else int(gpu["device"][0])
            mine = gpu["device"] == device
            self._add_other(
                self.gpu_plot, BEFORE_ALLOCATED, at(gpu.t[mine]), gpu["allocated"][mine]
            )
        self._build_levels()

    def _add_other(self, plot: pg.PlotItem, series: Series, t: np.ndarray, y: np.ndarray) -> None:
        curve = Curve(make_curve(plot, series))
        curve.extend(t, y.astype(np.float64), len(t))
        self.other_curves.append((plot, curve))

    def _build_levels(self) -> None:
        self._levels_built = True
        for curve in self._all_curves():
            curve.build_levels()

    def _on_mouse_moved(self, pos: QPointF) -> None:
        if self.profile is None or not self.ram_plot.sceneBoundingRect().united(
            self.lane.sceneBoundingRect()
        ).contains(pos):
            return
        t = float(self.lane.getViewBox().mapSceneToView(pos).x())
        for line in self.crosshairs:
            line.setPos(t)
            line.show()
        self.readout.setText(self.readout_at(t))

    def readout_at(self, t: float) -> str:
        """Exact values of every channel at time t (the sample at or before t)."""
        profile = self.profile
        if profile is None:
            return ""
        parts = [f"t = {time_label(t)}"]
        ram = profile.ram
        if self.whole_job and self.job is not None:
            # The job's total, then each process' own RSS, as the RAM plot draws them.
            if ram is not None and len(ram):
                i = max(0, int(np.searchsorted(ram.t, t, side="right")) - 1)
                parts.append(f"tree {format_bytes(int(process_tree_bytes(ram, i, i + 1)[0]))}")
            parts += self.job_curves.readout(self.job, t)
        elif ram is not None and len(ram):
            i = max(0, int(np.searchsorted(ram.t, t, side="right")) - 1)
            parts += [
                f"main {format_bytes(int(ram['rss'][i]))}"
                f" (peak {format_bytes(int(ram['rss_peak'][i]))})",
                f"workers {format_bytes(int(ram['children'][i]))}",
                f"tree {format_bytes(int(process_tree_bytes(ram, i, i + 1)[0]))}",
            ]
        gpu = profile.gpu
        if gpu is not None and not self.whole_job:
            i = max(0, int(np.searchsorted(gpu.t, t, side="right")) - 1)
            parts += [
                f"allocated {format_bytes(int(gpu['allocated'][i]))}",
                f"reserved {format_bytes(int(gpu['reserved'][i]))}",
            ]
        steps = profile.steps
        if steps is not None:
            parts.append(f"step {int(np.searchsorted(steps.t, t, side='right'))}")
        return "   ·   ".join(parts)

    # -- look -------------------------------------------------------------------------------

    def apply_palette(self, palette: QPalette) -> None:
        background = palette.color(QPalette.ColorRole.Base)
        foreground = palette.color(QPalette.ColorRole.Text)
        self.graphics.setBackground(background)
        for plot in (self.ram_plot, self.gpu_plot):
            plot.getAxis("left").grid_background = background
        for plot in (self.ram_plot, self.gpu_plot, self.lane):
            for name in ("left", "bottom"):
                axis = plot.getAxis(name)
                axis.setPen(pg.mkPen(foreground))
                axis.setTextPen(pg.mkPen(foreground))
        self.empty.setColor(QColor(foreground))
        # A hidden curve's name: halfway to the background, greyed on a light or dark base.
        hidden = blend(foreground, background, 0.5)
        for plot in (self.ram_plot, self.gpu_plot):
            plot.legend.set_colors(foreground, hidden)
        self.event_lane.labels.set_background(background)
