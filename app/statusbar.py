"""The status bar: the state of the run shown, how long it ran, its RAM and VRAM with their
running peaks, how fast samples come in (and the rate asked for, when the recorder fell
behind it), and the offer to compare with the previous run."""

from __future__ import annotations

from collections.abc import Callable
from time import monotonic

import numpy as np
from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtGui import QHelpEvent, QPainter, QPaintEvent
from PySide6.QtWidgets import QLabel, QPushButton, QStatusBar, QToolTip, QWidget

from memsight.app.plaintext import tooltip
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import process_tree_bytes
from memsight.profiler.profile.summary import (
    SamplingPace,
    format_rate,
    sampling_behind_text,
    sampling_pace,
)
from memsight.profiler.units import format_bytes, format_duration

RIGHT_MARGIN = 8  # px between the last field and the window's right edge
RATE_EVERY_S = 1.0  # samples/s is counted over this long, so the figure does not flicker


def rate_text(pace: SamplingPace) -> str:
    """The rate samples came in at, with the rate asked for when the recorder fell behind:
    "1000 samples/s", "885 samples/s (asked 1000)"; "" before there are two samples."""
    rate, asked = pace.samples_per_second, pace.asked_per_second
    if rate is None:
        return ""
    if pace.behind and asked is not None:
        return f"{format_rate(rate)} samples/s (asked {format_rate(asked)})"
    return f"{format_rate(rate)} samples/s"


class StatusField(QLabel):
    """One figure in the status bar, which gives up width before the window does: squeezed,
    it ends in an ellipsis and shows the whole text as its tooltip. A label's minimum width is
    its whole text, so five of them (longer during a run) would set the window's."""

    def __init__(self, text: str = "") -> None:
        super().__init__(text)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.note = ""  # plain text its tooltip adds to the figure ("" for none)

    def minimumSizeHint(self) -> QSize:
        whole = super().minimumSizeHint()
        return QSize(min(whole.width(), self.fontMetrics().horizontalAdvance("M…")), whole.height())

    def shown_text(self) -> str:
        """The text as it fits the label's width now."""
        return self.fontMetrics().elidedText(
            self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width()
        )

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        self.style().drawItemText(
            painter,
            self.contentsRect(),
            int(self.alignment()),
            self.palette(),
            self.isEnabled(),
            self.shown_text(),
            self.foregroundRole(),
        )

    def tooltip_text(self) -> str:
        """What its tooltip says: the whole text when squeezed, then its note; "" for none."""
        parts = [self.text()] if self.shown_text() != self.text() else []
        return "\n".join([*parts, self.note] if self.note else parts)

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and self.tooltip_text():
            assert isinstance(event, QHelpEvent)
            QToolTip.showText(event.globalPos(), tooltip(self.tooltip_text()), self)
            return True
        return super().event(event)


class RunStatusBar(QStatusBar):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state_label = StatusField("Ready")
        self.elapsed_label = StatusField()
        self.ram_label = StatusField()
        self.gpu_label = StatusField()
        self.rate_label = StatusField()
        for label in (
            self.state_label,
            self.elapsed_label,
            self.ram_label,
            self.gpu_label,
            self.rate_label,
        ):
            self.addPermanentWidget(label)
        # A maximized window has no size grip, which otherwise keeps the last field off the
        # window's right edge.
        self.rate_label.setContentsMargins(0, 0, RIGHT_MARGIN, 0)
        # Offered once a re-run of the same script ends: one click shows what the change did.
        self.compare_previous_button = QPushButton("Compare with previous run")
        self.compare_previous_button.setFlat(True)
        self.compare_previous_button.hide()
        self.addWidget(self.compare_previous_button)
        # column name -> (profile, rows seen, maximum so far)
        self._peaks: dict[str, tuple[Profile | None, int, int]] = {}
        # (profile, samples, running, when) of the sampling rate shown: for an ended run, the
        # samples it was counted from; for a running one, when it was counted last
        self._rate: tuple[Profile | None, int, bool, float] = (None, 0, False, 0.0)

    def show_stopping(self) -> None:
        self.state_label.setText("Stopping…")

    def show_status(
        self,
        profile: Profile,
        running: bool,
        stopping: bool = False,
        elapsed: float = 0.0,
        waiting_for_input: bool = False,
    ) -> None:
        """The figures of `profile`; `elapsed` is the time since a running one started;
        `waiting_for_input`: the running script is blocked reading its stdin."""
        if running:
            self.state_label.setText(
                "Stopping…"
                if stopping
                else "Running: waiting for input"
                if waiting_for_input
                else "Running"
            )
        elif profile.damaged is not None:
            damage = profile.damaged
            self.state_label.setText(
                f"Damaged file: read {damage.read_bytes:,} of {damage.file_bytes:,} bytes"
            )
            elapsed = profile.duration
        else:
            self.state_label.setText(f"Ended: {profile.info.ended_by}")
            elapsed = profile.duration
        self.elapsed_label.setText(format_duration(elapsed))
        # Until the run's first sample, a dash: never the figures of the run shown before.
        ram = profile.ram
        if ram is not None and len(ram) and profile.subprocesses:
            # A job (torchrun and its ranks, mp.spawn): the launcher's own RSS is the least of
            # it. The process tree, as the timeline's "Whole job (tree)" curve draws it.
            rows = len(ram)
            now = int(process_tree_bytes(ram, rows - 1, rows)[0])
            peak = self._peak(
                profile,
                "tree",
                lambda part: process_tree_bytes(ram, part.start, part.stop),
                rows,
            )
            self.ram_label.setText(f"Job RAM {format_bytes(now)} · peak {format_bytes(peak)}")
        elif ram is not None and len(ram):
            rss_peak = ram["rss_peak"]
            self.ram_label.setText(
                f"RAM {format_bytes(int(ram['rss'][-1]))} · "
                f"peak {format_bytes(self._peak(profile, 'ram', rss_peak.__getitem__, len(ram)))}"
            )
        else:
            self.ram_label.setText("RAM —")
        gpu = profile.gpu
        if gpu is not None and len(gpu):
            allocated_peak = gpu["allocated_peak"]
            peak = self._peak(profile, "gpu", allocated_peak.__getitem__, len(gpu))
            self.gpu_label.setText(
                f"VRAM {format_bytes(int(gpu['allocated'][-1]))} · peak {format_bytes(peak)}"
            )
        elif gpu is not None:
            self.gpu_label.setText("VRAM —")
        else:
            self.gpu_label.setText("no GPU")
        self._show_rate(profile, running)

    def _show_rate(self, profile: Profile, running: bool) -> None:
        """Samples so far, once ended; the rate they come in at, while running. Both from
        sampling_pace, which says whether the recorder fell behind the asked interval."""
        counted, samples, was_running, since = self._rate
        count = profile.sample_count
        if not running:
            if counted is not profile or samples != count or was_running:  # counted once
                pace = sampling_pace(profile)
                text = f"{count:,} samples"
                if pace.behind:
                    text += f" · {rate_text(pace)}"
                self._set_rate(text, pace)
                self._rate = (profile, count, False, 0.0)
            return
        now = monotonic()
        if counted is not profile or not was_running:  # a new run: counted from its start on
            self._rate = (profile, 0, True, now)
            self._set_rate("", None)
        elif now - since >= RATE_EVERY_S:
            pace = sampling_pace(profile, last_s=RATE_EVERY_S)
            self._set_rate(rate_text(pace), pace)
            self._rate = (profile, 0, True, now)

    def _set_rate(self, text: str, pace: SamplingPace | None) -> None:
        behind = sampling_behind_text(pace) if pace is not None else None
        self.rate_label.note = f"Sampling: {behind}" if behind is not None else ""
        self.rate_label.setText(text)

    def _peak(
        self, profile: Profile, name: str, rows_of: Callable[[slice], np.ndarray], count: int
    ) -> int:
        """Running maximum of a growing column of `count` rows, `rows_of(slice)` giving some
        of them: each update looks only at the new rows."""
        seen, rows, peak = self._peaks.get(name, (None, 0, 0))
        if seen is not profile or rows > count:
            rows, peak = 0, 0
        if count > rows:
            peak = max(peak, int(rows_of(slice(rows, count)).max()))
        self._peaks[name] = (profile, count, peak)
        return peak
