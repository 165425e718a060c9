"""The timeline's axes: bytes in binary units on round numbers, and time since the start."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QColor

from memsight.profiler.units import unit_for


def blend(color: QColor, background: QColor, share: float) -> QColor:
    """`color` laid at `share` (0-1) of its strength over `background`, as one opaque colour."""
    return QColor.fromRgbF(
        color.redF() * share + background.redF() * (1 - share),
        color.greenF() * share + background.greenF() * (1 - share),
        color.blueF() * share + background.blueF() * (1 - share),
    )


def without_si_prefix(plot: pg.PlotItem) -> None:
    """Every axis of `plot`, shown or hidden, without pyqtgraph's automatic SI prefix.

    Ours format their own units (ByteAxis, SecondsAxis) and the others show no values; the
    prefix's bookkeeping re-renders an axis' label as HTML at each change of its range, shown
    or not: 0.6 ms of every frame of a pan across a long run."""
    for name in ("left", "bottom", "right", "top"):
        plot.getAxis(name).enableAutoSIPrefix(False)


class ByteAxis(pg.AxisItem):
    """A y axis in B / KiB / MiB / GiB with ticks on round numbers of that unit.

    Its grid lines are opaque, in the colour the translucent ones would have on
    `grid_background` (the plot's background), and the axis lies below the plot's data
    (timeline.py), so the curves cross over them: a translucent line is blended pixel by
    pixel, which in software rendering made this axis cost 2.7 ms of every live frame at
    1600x1000, and 0.8 ms opaque.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.grid_background: QColor | None = None

    def generateDrawSpecs(self, p: Any) -> Any:
        specs = super().generateDrawSpecs(p)
        if specs is None or self.grid is False or self.grid_background is None:
            return specs
        axis, ticks, texts = specs
        opaque = []
        for pen, start, end in ticks:
            color = pen.color()
            solid = pg.mkPen(blend(color, self.grid_background, color.alphaF()), width=pen.widthF())
            opaque.append((solid, start, end))
        return axis, opaque, texts

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:
        span = maxVal - minVal
        if span <= 0 or size <= 0:
            return super().tickSpacing(minVal, maxVal, size)  # type: ignore[no-any-return]
        _, unit = unit_for(max(abs(minVal), abs(maxVal)))
        wanted = max(2.0, size / 40)  # about one labelled tick per 40 pixels
        raw = span / unit / wanted
        magnitude = 10 ** np.floor(np.log10(raw)) if raw > 0 else 1.0
        step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
        return [(step * unit, 0)]  # no minor level: its grid lines cost more than they tell

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        if not values:
            return []
        unit, size = unit_for(max(abs(v) for v in values))
        # As many decimals as the step needs: quarter-GiB ticks read 0.25 and 0.75, not
        # 0.2 and 0.8 at lines that are not there.
        decimals = decimals_for(spacing / size, most=3)
        return [f"{v / size:.{decimals}f} {unit}" for v in values]


# Tick steps of a clock, in seconds: whole seconds, minutes and hours, up to a day.
CLOCK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)
DAY = 86400
# A view this long, or reaching this far, is labelled as a clock ("m:ss"); one reaching an
# hour as "h:mm:ss".
CLOCK_FROM_S = 120
HOUR = 3600


class SecondsAxis(pg.AxisItem):
    """Seconds since the start, in one format per view (every tick level alike): a clock when
    the view spans or reaches past two minutes, "h:mm:ss" once it reaches an hour and "m:ss"
    below, with the decimals the spacing needs; else seconds ("2.5 s"). Views of two minutes
    or more tick on whole seconds, minutes or hours: a day-long run reads "22:00:00", never
    "1333:20"."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The ticks say "s" themselves: pyqtgraph's own scaling would add "(x0.001)" to the
        # label of a run under a second while the ticks stay in seconds.
        self.enableAutoSIPrefix(False)

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:
        span = maxVal - minVal
        if span < CLOCK_FROM_S or size <= 0:
            return super().tickSpacing(minVal, maxVal, size)  # type: ignore[no-any-return]
        wanted = max(2.0, size / 90)  # about one "h:mm:ss" label per 90 pixels
        raw = span / wanted
        step = next((s for s in CLOCK_STEPS if s >= raw), DAY * np.ceil(raw / DAY))
        return [(float(step), 0)]  # no minor level, as on the byte axis

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        if not values:
            return []
        low, high = self.range
        decimals = decimals_for(spacing)
        if high - low >= CLOCK_FROM_S or high >= CLOCK_FROM_S:
            hours = max(high, *values) >= HOUR
            return [clock(v, hours, decimals) for v in values]
        return [f"{v:.{decimals}f} s" for v in values]


def time_label(seconds: float) -> str:
    """A point in time read off the timeline, to the millisecond, as the time axis words it
    past two minutes ("13:38:19.353") and in seconds below ("1.250 s")."""
    if seconds < CLOCK_FROM_S:
        return f"{seconds:.3f} s"
    return clock(seconds, seconds >= HOUR, 3)


def clock(seconds: float, hours: bool = False, decimals: int = 0) -> str:
    """Seconds as "m:ss", or "h:mm:ss" with `hours`, the seconds with `decimals` (a negative
    time keeps its sign)."""
    sign, left = ("-" if seconds < 0 else ""), round(abs(seconds), decimals)
    minutes, secs = divmod(left, 60)
    width = 2 + (decimals + 1 if decimals else 0)
    text = f"{secs:0{width}.{decimals}f}"
    if not hours:
        return f"{sign}{int(minutes)}:{text}"
    return f"{sign}{int(minutes) // 60}:{int(minutes) % 60:02d}:{text}"


def decimals_for(spacing: float, most: int = 6) -> int:
    """The fewest decimals that tell ticks `spacing` apart exactly (0.25 → 2, 0.0005 → 4): a
    view of a few milliseconds never labels two ticks "0.000 s"."""
    decimals = 0
    while decimals < most and abs(round(spacing, decimals) - spacing) > spacing * 1e-6:
        decimals += 1
    return decimals
