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
        step = spacing / size
        decimals = 0 if step >= 1 else (1 if step >= 0.1 else 2)
        return [f"{v / size:.{decimals}f} {unit}" for v in values]


class SecondsAxis(pg.AxisItem):
    """Seconds since the start, in one format per view: "m:ss" when it spans two minutes or
    more (every tick level alike), else seconds with the decimals the spacing needs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The ticks say "s" themselves: pyqtgraph's own scaling would add "(x0.001)" to the
        # label of a run under a second while the ticks stay in seconds.
        self.enableAutoSIPrefix(False)

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        low, high = self.range
        if high - low >= 120:
            return [f"{int(v // 60)}:{int(v % 60):02d}" for v in values]
        decimals = decimals_for(spacing)
        return [f"{v:.{decimals}f} s" for v in values]


def decimals_for(spacing: float, most: int = 6) -> int:
    """The fewest decimals that tell ticks `spacing` apart exactly (0.25 → 2, 0.0005 → 4): a
    view of a few milliseconds never labels two ticks "0.000 s"."""
    decimals = 0
    while decimals < most and abs(round(spacing, decimals) - spacing) > spacing * 1e-6:
        decimals += 1
    return decimals
