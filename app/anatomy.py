"""The anatomy panel: what fills the peak of one training iteration, by module group.

The view half of profiler/diagnosis/anatomy_report.py: one horizontal bar per module group
(largest first, as module_groups returns them), each split into the parts of PARTS in their
colours, then a grey row for what the modules do not account for. Every label, colour and
number comes from anatomy_report, so the app says what `memsight report` and the HTML report
say. Module paths and class names come from the target: they are painted as text and shown
in tooltips through app/plaintext.py, never as markup.

The bars are painted by one widget in a scroll area rather than made of a widget per row: a
model can have hundreds of groups, and painting only the rows in view keeps that fast.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import islice

from PySide6.QtCore import QEvent, QPoint, QPointF, QRect, QSize, Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetrics,
    QHelpEvent,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPolygonF,
    QResizeEvent,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QFrame,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QStackedWidget,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from memsight.app.plaintext import MAX_LABEL, shorten, tooltip
from memsight.profiler.diagnosis.anatomy import Anatomy, main_anatomy
from memsight.profiler.diagnosis.anatomy_report import (
    OTHER_COLOR,
    OTHER_LABEL,
    PARTIAL_TEXT,
    PARTS,
    anatomy_skipped,
    composition_text,
    other_text,
    part_bytes,
    title,
)
from memsight.profiler.diagnosis.fit import module_groups
from memsight.profiler.profile.model import Profile
from memsight.profiler.units import format_bytes

NO_RUN = "No run yet"
NO_ANATOMY = (
    "No anatomy in this run: it is measured on the first training iteration "
    "(a forward with autograd, then backward)."
)
NO_ANATOMY_YET = (
    "The anatomy will appear here after the first training iteration "
    "(a forward with autograd, then backward)."
)
# While a run records, the measured iteration's peak (and so "other") can still rise over the
# next iterations (anatomy.PEAK_ITERATIONS): the shown anatomy is read again at most once a
# LIVE_REREAD_S, and no more often than keeps the reading under LIVE_SHARE of the GUI thread
# (a model of thousands of modules takes tens of milliseconds to read).
LIVE_REREAD_S = 1.0
LIVE_SHARE = 0.05

ROW_PADDING = 8  # px above and below a bar, together
GAP = 10  # px between the label, the bar and the total
MARGIN = 6  # px around the rows
LABEL_SHARE = 0.4  # of the width, the most the labels take when they are long
LABEL_MIN = 80  # px: the least a label keeps when the panel is narrow
BAR_MIN = 60  # px: the least the bars keep when the labels are long
SWATCH = 10  # px: a legend's colour square
BREAK_WIDTH = 4  # px: the gap across a bar cut short


def not_measured_text(reason: str) -> str:
    return f"No anatomy in this run: the iteration was not measured: {reason}."


@dataclass(frozen=True)
class BarRow:
    """One row of the picture: a module group, or "other"."""

    label: str
    parts: tuple[tuple[int, str], ...]  # (bytes, colour), in stacking order
    total: int
    tip: str  # the tooltip's text, plain
    other: bool = False  # what the modules do not account for

    @property
    def total_text(self) -> str:
        return format_bytes(self.total)


def group_rows(anatomy: Anatomy) -> list[BarRow]:
    """The groups, largest first, then "other" when the peak was sampled."""
    rows = []
    for group in module_groups(anatomy):
        values = part_bytes(group)
        lines = [f"{group.label}: {format_bytes(group.total)}"]
        lines += [
            f"  {label}: {format_bytes(value)}"
            for value, (_, label, _, _) in zip(values, PARTS, strict=True)
        ]
        rows.append(
            BarRow(
                group.label,
                tuple(
                    (value, colour) for value, (_, _, colour, _) in zip(values, PARTS, strict=True)
                ),
                group.total,
                "\n".join(lines),
            )
        )
    other = anatomy.other_bytes
    if other is not None:
        rows.append(
            BarRow(
                OTHER_LABEL,
                ((other, OTHER_COLOR),),
                other,
                f"{OTHER_LABEL}: {format_bytes(other)}\n{other_text(anatomy)}",
                other=True,
            )
        )
    return rows


class AnatomyBars(QWidget):
    """The rows, painted: the label on the left (elided with "…" when it does not fit), the
    stacked bar, the total on the right. Every bar on one scale, the largest group's; an
    "other" larger still is drawn full width and cut short (`scale`)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: list[BarRow] = []
        self.hovered: int | None = None
        self._label_width = 0  # px: the widest label, as the font draws it
        self._total_width = 0  # px: the widest total
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    # -- contents -----------------------------------------------------------------------------

    def set_rows(self, rows: list[BarRow]) -> None:
        self.rows = rows
        self.hovered = None
        self._measure()
        self.updateGeometry()
        self.setFixedHeight(self.sizeHint().height())
        self.update()

    def _measure(self) -> None:
        metrics = self.fontMetrics()
        self._label_width = max(
            (metrics.horizontalAdvance(shorten(r.label, MAX_LABEL)) for r in self.rows), default=0
        )
        self._total_width = max(
            (metrics.horizontalAdvance(r.total_text) for r in self.rows), default=0
        )

    @property
    def row_height(self) -> int:
        return self.fontMetrics().height() + ROW_PADDING

    def sizeHint(self) -> QSize:
        return QSize(LABEL_MIN + BAR_MIN + 2 * GAP + 2 * MARGIN, self._content_height())

    def minimumSizeHint(self) -> QSize:
        return QSize(LABEL_MIN + BAR_MIN + 2 * GAP + 2 * MARGIN, self._content_height())

    def _content_height(self) -> int:
        return 2 * MARGIN + self.row_height * len(self.rows)

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.FontChange:
            self._measure()
            self.setFixedHeight(self.sizeHint().height())
        super().changeEvent(event)

    # -- geometry -----------------------------------------------------------------------------

    def columns(self) -> tuple[QRect, QRect, QRect]:
        """The x extents of the labels, the bars and the totals (as rects of one row's height,
        at y 0) for the present width."""
        inner = self.width() - 2 * MARGIN
        total_width = self._total_width
        room = inner - total_width - 2 * GAP
        label_width = min(self._label_width, max(LABEL_MIN, int(room * LABEL_SHARE)))
        label_width = max(min(label_width, room - BAR_MIN), min(LABEL_MIN, self._label_width))
        bar_width = max(1, room - label_width)
        height = self.row_height
        labels = QRect(MARGIN, 0, max(0, label_width), height)
        bars = QRect(labels.right() + 1 + GAP, 0, bar_width, height)
        totals = QRect(bars.right() + 1 + GAP, 0, total_width, height)
        return labels, bars, totals

    def row_at(self, y: int) -> int | None:
        index = (y - MARGIN) // self.row_height
        return index if y >= MARGIN and 0 <= index < len(self.rows) else None

    def row_rect(self, index: int) -> QRect:
        return QRect(0, MARGIN + index * self.row_height, self.width(), self.row_height)

    def shown_label(self, index: int) -> str:
        """The label of row `index` as it is drawn at the present width ("…" when cut)."""
        labels, _, _ = self.columns()
        text = shorten(self.rows[index].label, MAX_LABEL)
        metrics = self.fontMetrics()
        # Measured as the column was (elidedText alone cuts a text its exact advance fits).
        if metrics.horizontalAdvance(text) <= labels.width():
            return text
        return metrics.elidedText(text, Qt.TextElideMode.ElideRight, labels.width())

    def tooltip_at(self, point: QPoint) -> str:
        """The tooltip over `point`, as given to Qt: the row's full label, its total and each
        part's bytes, shown as the literal text it is."""
        index = self.row_at(point.y())
        return "" if index is None else tooltip(self.row_tip(index))

    def row_tip(self, index: int) -> str:
        row = self.rows[index]
        if not self.is_cut(index):
            return row.tip
        times = row.total / self.scale
        return f"{row.tip}\n(its bar is cut short: {times:,.0f} times the largest group)"

    @property
    def scale(self) -> int:
        """The bytes of a full-width bar: the largest module group's. "other" is left out: it
        holds the interpreter and its libraries in RAM, often hundreds of times a small
        model's bytes, and on its scale every group would be a sliver."""
        groups = [r.total for r in self.rows if not r.other]
        return max(groups, default=0) or max((r.total for r in self.rows), default=0)

    def is_cut(self, index: int) -> bool:
        """Row `index` holds more than a full-width bar: drawn full width with a break."""
        return self.rows[index].total > self.scale

    def bar_extent(self, index: int, width: int | None = None) -> int:
        """Row `index`'s bar length in px on the shared scale (`width`: the bars' column,
        when the caller has it)."""
        if width is None:
            width = self.columns()[1].width()
        scale, total = self.scale, self.rows[index].total
        if not scale or not total:
            return 0
        return min(width, max(1, round(width * total / scale)))  # a row that holds bytes shows

    # -- events -------------------------------------------------------------------------------

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            index = self.row_at(event.pos().y())
            if index is None:
                QToolTip.hideText()
                event.ignore()
                return True
            # Tied to the row's rect: moving to another row shows that row's tooltip.
            QToolTip.showText(
                event.globalPos(), self.tooltip_at(event.pos()), self, self.row_rect(index)
            )
            return True
        return super().event(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        self._hover(self.row_at(int(event.position().y())))
        super().mouseMoveEvent(event)

    def leaveEvent(self, event: QEvent) -> None:
        self._hover(None)
        super().leaveEvent(event)

    def _hover(self, index: int | None) -> None:
        if index == self.hovered:
            return
        for old in (self.hovered, index):
            if old is not None:
                self.update(self.row_rect(old))
        self.hovered = index

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.update()  # the labels elide and the bars scale to the new width

    # -- painting -----------------------------------------------------------------------------

    def _band_colours(self, index: int) -> list[QColor]:
        """The colours a row's background is painted with, one over the other: the window,
        a faint stripe every other row, the highlight under the mouse. From the palette's
        text and highlight, so that light and dark palettes both read."""
        palette = self.palette()
        colours = [palette.color(QPalette.ColorRole.Window)]
        if index % 2:
            stripe = QColor(palette.color(QPalette.ColorRole.WindowText))
            stripe.setAlpha(14)
            colours.append(stripe)
        if index == self.hovered:
            hover = QColor(palette.color(QPalette.ColorRole.Highlight))
            hover.setAlpha(56)
            colours.append(hover)
        return colours

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        palette = self.palette()
        exposed = event.rect()
        painter.fillRect(exposed, palette.color(QPalette.ColorRole.Window))
        if not self.rows:
            painter.end()
            return
        metrics = self.fontMetrics()
        labels, bars, totals = self.columns()
        height = self.row_height
        bar_height = max(4, metrics.height() - 2)
        first = max(0, (exposed.top() - MARGIN) // height)
        last = min(len(self.rows) - 1, (exposed.bottom() - MARGIN) // height)
        text_colour = palette.color(QPalette.ColorRole.WindowText)
        for index in range(first, last + 1):
            row = self.rows[index]
            top = MARGIN + index * height
            band = self._band_colours(index)
            for layer in band[1:]:
                painter.fillRect(QRect(0, top, self.width(), height), layer)
            if row.other and index:
                # "other" is not a module: a line sets it apart from the groups above.
                painter.setPen(palette.color(QPalette.ColorRole.Mid))
                painter.drawLine(MARGIN, top, self.width() - MARGIN, top)
            painter.setPen(text_colour)
            painter.drawText(
                labels.translated(0, top),
                Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                self.shown_label(index),
            )
            painter.drawText(
                totals.translated(0, top),
                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                row.total_text,
            )
            # Each part ends at its rounded running sum: no gaps or overlaps between parts.
            y = top + (height - bar_height) // 2
            extent = self.bar_extent(index, bars.width())
            done = 0
            x = bars.left()
            for value, part_colour in row.parts:
                done += value
                end = bars.left() + (round(extent * done / row.total) if row.total else 0)
                if end > x:
                    painter.fillRect(QRect(x, y, end - x, bar_height), QColor(part_colour))
                x = end
            if self.is_cut(index) and extent > 4 * BREAK_WIDTH:
                self._paint_break(
                    painter, bars.left() + extent - 3 * BREAK_WIDTH, y, bar_height, band
                )
        painter.end()

    def _paint_break(
        self, painter: QPainter, x: int, y: int, bar_height: int, band: list[QColor]
    ) -> None:
        """A slanted gap across the bar, in the row's background: the bar goes on past the
        scale (a chart's usual axis break)."""
        slant = bar_height // 2
        gap = QPolygonF(
            [
                QPointF(x, y + bar_height + 1),
                QPointF(x + BREAK_WIDTH, y + bar_height + 1),
                QPointF(x + BREAK_WIDTH + slant, y - 1),
                QPointF(x + slant, y - 1),
            ]
        )
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        for colour in band:
            painter.setBrush(colour)
            painter.drawPolygon(gap)
        painter.restore()


class Legend(QWidget):
    """The parts' colours and names (and "other"), wrapped onto as many lines as the width
    needs."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.items: list[tuple[str, str]] = [(label, colour) for _, label, colour, _ in PARTS]
        self.items.append((OTHER_LABEL, OTHER_COLOR))
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    def _item_width(self, metrics: QFontMetrics, label: str) -> int:
        return SWATCH + 5 + metrics.horizontalAdvance(label)

    def _layout(self, width: int) -> list[tuple[int, int]]:
        """Each item's (x, line) at `width`."""
        metrics = self.fontMetrics()
        places = []
        x, line = MARGIN, 0
        for label, _ in self.items:
            item = self._item_width(metrics, label)
            if x > MARGIN and x + item > width - MARGIN:
                x, line = MARGIN, line + 1
            places.append((x, line))
            x += item + 2 * GAP
        return places

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        lines = 1 + max(line for _, line in self._layout(width))
        return lines * (self.fontMetrics().height() + 4)

    def sizeHint(self) -> QSize:
        metrics = self.fontMetrics()
        width = 2 * MARGIN + sum(
            self._item_width(metrics, label) + 2 * GAP for label, _ in self.items
        )
        return QSize(width, self.heightForWidth(width))

    def minimumSizeHint(self) -> QSize:
        metrics = self.fontMetrics()
        widest = max(self._item_width(metrics, label) for label, _ in self.items)
        return QSize(2 * MARGIN + widest, self.fontMetrics().height() + 4)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        metrics = self.fontMetrics()
        line_height = metrics.height() + 4
        painter.setPen(self.palette().color(QPalette.ColorRole.WindowText))
        for (label, colour), (x, line) in zip(self.items, self._layout(self.width()), strict=True):
            top = line * line_height
            painter.fillRect(
                QRect(x, top + (line_height - SWATCH) // 2, SWATCH, SWATCH), QColor(colour)
            )
            painter.drawText(
                QRect(x + SWATCH + 5, top, metrics.horizontalAdvance(label) + 2, line_height),
                Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                label,
            )
        painter.end()


class AnatomyPanel(QWidget):
    """The heading (anatomy_report.title), the legend and the bars of the profile's main
    anatomy; a one-line message when there is none."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.profile: Profile | None = None
        self.running = False
        self.anatomy: Anatomy | None = None
        self._seen_events = 0
        self._read_at = 0.0  # time.monotonic() of the last read of the anatomy
        self._read_s = 0.0  # how long that read took

        self.empty = QLabel(NO_RUN)
        self.empty.setObjectName("anatomy_empty")
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setTextFormat(Qt.TextFormat.PlainText)
        self.empty.setMargin(12)

        self.heading = QLabel("")
        self.heading.setObjectName("anatomy_heading")
        self.heading.setTextFormat(Qt.TextFormat.PlainText)
        self.heading.setWordWrap(True)
        self.heading.setContentsMargins(MARGIN, 2, MARGIN, 0)
        bold = QFont(self.heading.font())
        bold.setBold(True)
        self.heading.setFont(bold)
        # The whole peak by part, before the modules: as the text report's second line.
        self.parts = QLabel("")
        self.parts.setObjectName("anatomy_parts")
        self.parts.setTextFormat(Qt.TextFormat.PlainText)
        self.parts.setWordWrap(True)
        self.parts.setContentsMargins(MARGIN, 0, MARGIN, 0)
        self.legend = Legend()
        self.bars = AnatomyBars()
        self.scroller = QScrollArea()
        self.scroller.setObjectName("anatomy_bars")
        self.scroller.setWidget(self.bars)
        self.scroller.setWidgetResizable(True)
        self.scroller.setFrameShape(QFrame.Shape.NoFrame)
        self.scroller.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroller.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)

        page = QWidget()
        inner = QVBoxLayout(page)
        inner.setContentsMargins(0, 0, 0, 0)
        inner.setSpacing(4)
        inner.addWidget(self.heading)
        inner.addWidget(self.parts)
        inner.addWidget(self.legend)
        inner.addWidget(self.scroller, 1)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.empty)
        self.stack.addWidget(page)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.stack)

    # -- public API ---------------------------------------------------------------------------

    def set_profile(self, profile: Profile | None, running: bool = False) -> None:
        self.profile = profile
        self.running = running
        self.anatomy = None
        self._seen_events = 0
        self.refresh(force=True)

    def set_running(self, running: bool) -> None:
        self.running = running
        self.refresh(force=True)  # the final peak, or "none yet" becomes "none in this run"

    def refresh(self, force: bool = False) -> None:
        """Read the anatomy again when one arrived since the last call, or, while the run
        records and the panel is in view, now and then for its rising peak; cheap otherwise."""
        profile = self.profile
        if profile is None:
            self._show()
            return
        events = len(profile.events)
        arrived = any(e.type == "anatomy" for e in islice(profile.events, self._seen_events, None))
        self._seen_events = events
        now = time.monotonic()
        due = now - self._read_at >= max(LIVE_REREAD_S, self._read_s / LIVE_SHARE)
        rising = self.running and self.anatomy is not None and self.isVisible() and due
        if not (force or arrived or rising):
            return
        anatomy = main_anatomy(profile)
        if force or anatomy != self.anatomy:
            self.anatomy = anatomy
            self._show()
        self._read_at = time.monotonic()
        self._read_s = self._read_at - now

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.refresh()  # brought into view while the run records: its peak may have risen

    # -- drawing ------------------------------------------------------------------------------

    def _show(self) -> None:
        anatomy = self.anatomy
        if self.profile is None or anatomy is None:
            self.empty.setText(self._no_anatomy_text())
            self.stack.setCurrentWidget(self.empty)
            self.bars.set_rows([])
            return
        self.heading.setText(title(anatomy) + (PARTIAL_TEXT if anatomy.partial else ""))
        self.parts.setText("Peak: " + composition_text(anatomy))
        self.bars.set_rows(group_rows(anatomy))
        self.stack.setCurrentIndex(1)

    def _no_anatomy_text(self) -> str:
        if self.profile is None:
            return NO_RUN
        reason = anatomy_skipped(self.profile)
        if reason is not None:
            return not_measured_text(shorten(reason))
        return NO_ANATOMY_YET if self.running else NO_ANATOMY
