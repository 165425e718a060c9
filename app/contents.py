"""The contents panel: what was alive at a census, by holder, and what changed since another.

The view half of profiler/diagnosis/contents.py: it lists what contents() and changes()
return and decides nothing itself. Holder names come from the target (variables, classes),
so every cell is plain text, never rich text.
"""

from __future__ import annotations

from itertools import islice

from PySide6.QtCore import QEvent, QModelIndex, QObject, QSortFilterProxyModel, Qt, Signal
from PySide6.QtGui import QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QStackedWidget,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from memsight.app.plaintext import shorten, tooltip
from memsight.profiler.diagnosis.contents import (
    Census,
    ChangeRow,
    ContentsRow,
    census_label,
    censuses,
    changes,
    contents,
    is_partial,
    partial_text,
    size_text,
)
from memsight.profiler.profile.model import Profile
from memsight.profiler.units import format_bytes, format_signed_bytes

NO_RUN = "No run yet"
NO_CENSUS = (
    "No censuses in this run: they are taken between iterations of a training or inference "
    "loop (off with --census never or --no-hooks)"
)
NO_CENSUS_YET = (
    "No census yet: they are taken between iterations of a training or inference loop "
    "(off with --census never or --no-hooks)"
)
# Cells sort by this role: sizes by their byte counts, not by their text ("9 MiB" < "10 KiB").
SORT_ROLE = Qt.ItemDataRole.UserRole + 1
# A holder cell's (file, line), when the census knows where the holder lives.
LOCATION_ROLE = Qt.ItemDataRole.UserRole + 2
NO_LINE_ROLE = Qt.ItemDataRole.UserRole + 3  # why a holder has no line to open

# (header, tooltip) of the columns shared by both modes, after the holder (and the changes).
ROW_COLUMNS = (
    ("Tensors", "Tensors the holder reaches"),
    ("Bytes", "Bytes of their storages"),
    ("Graph-kept", "Bytes of saved tensors that only their autograd graphs keep alive"),
    ("With graph", "Tensors that carry an autograd graph"),
    ("Devices", ""),
    ("Dtypes", ""),
    ("Shapes", "A few of the shapes"),  # last: it takes the width left over
)
CHANGE_COLUMNS = (
    ("Δ Bytes", "Bytes gained (+) or freed (-) since the earlier census, graph-kept included"),
    ("Δ Tensors", "Tensors gained (+) or lost (-) since the earlier census"),
)
HOLDER_MIN_WIDTH = 240  # px: the holder's name and container, at least; the rest in the tooltip
# px: the shapes column, when the holder needs the room (its text then ends in "…", the cell's
# tooltip has them all). Shapes are an example; the holder is the answer.
SHAPES_MIN_WIDTH = 120


def _cell(text: str, key: int | str, number: bool = False) -> QStandardItem:
    item = QStandardItem(text)
    item.setData(key, SORT_ROLE)
    item.setEditable(False)
    if number:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


def _row_cells(row: ContentsRow) -> list[QStandardItem]:
    """The cells after the holder (and the changes)."""
    devices, dtypes, shapes = ", ".join(row.devices), ", ".join(row.dtypes), ", ".join(row.shapes)
    return [
        _cell(f"{row.count:,}", row.count, number=True),
        _cell(size_text(row.bytes), row.bytes, number=True),
        _cell(size_text(row.graph_bytes), row.graph_bytes, number=True),
        _cell(f"{row.with_graph:,}" if row.with_graph else "-", row.with_graph, number=True),
        _cell(devices, devices),
        _cell(dtypes, dtypes),
        _shapes_cell(shapes),
    ]


def _shapes_cell(shapes: str) -> QStandardItem:
    item = _cell(shapes, shapes)
    item.setToolTip(tooltip(shapes))  # the whole list, when the column is narrower
    return item


def _holder_cell(row: ContentsRow, gone: bool = False) -> QStandardItem:
    holder = shorten(row.holder)
    text = f"{holder} (gone)" if gone else holder
    item = _cell(text, text.lower())
    if row.file and row.line:
        item.setData((row.file, row.line), LOCATION_ROLE)
        item.setToolTip(tooltip(f"{row.holder}\n{row.place} (double-click to open)"))
    else:
        item.setData(no_line_text(row), NO_LINE_ROLE)
        item.setToolTip(tooltip(f"{row.holder}\n{no_line_text(row)}"))
    return item


def no_line_text(row: ContentsRow) -> str:
    """Why a holder has no line to open (a double-click on it says so)."""
    if row.kind == "global":
        return (
            "No line to open: a module's global; a census sees what holds the memory, "
            "not the line that assigned it (search the module for its name)"
        )
    return "No line to open: the census did not see the code this holder lives in"


class ContentsPanel(QWidget):
    """A census picker, a "compare with" picker and the table of holders (or of changes).

    Emits censusSelected(census or None, chosen) when the census shown or the one compared
    with changes; `chosen` is True when the user picked the census, so the window brings it
    into view only then. Emits locationActivated(file, line) when a row whose holder's place
    is known is double-clicked (or Enter is pressed on it)."""

    censusSelected = Signal(object, bool)
    locationActivated = Signal(str, int)
    message = Signal(str)  # a line for the status bar: why a holder has no line to open

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.profile: Profile | None = None
        self.running = False
        self.taken: list[Census] = []
        self._seen_events = 0
        self._mode = ""  # "contents" or "changes": what the table's columns are for

        self.empty = QLabel(NO_RUN)
        self.empty.setObjectName("contents_empty")
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setTextFormat(Qt.TextFormat.PlainText)
        self.empty.setMargin(12)

        self.census = QComboBox()
        self.census.setObjectName("contents_census")
        self.census.setToolTip("The census whose contents are shown")
        self.compare = QComboBox()
        self.compare.setObjectName("contents_compare")
        self.compare.setToolTip("An earlier census: the table then shows what changed since it")
        for combo in (self.census, self.compare):
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.header = QLabel("")
        self.header.setTextFormat(Qt.TextFormat.PlainText)
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(QLabel("Census"))
        bar.addWidget(self.census)
        bar.addSpacing(8)
        bar.addWidget(QLabel("compare with"))
        bar.addWidget(self.compare)
        bar.addSpacing(8)
        bar.addWidget(self.header, 1)

        self.model = QStandardItemModel(self)
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.proxy.setSortRole(SORT_ROLE)
        self.table = QTableView()
        self.table.setObjectName("contents")
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().hide()
        # One line of text a row: the dock shares its height with the timeline above it.
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)
        self._unsorted()
        self.table.viewport().installEventFilter(self)

        page = QWidget()
        inner = QVBoxLayout(page)
        inner.setContentsMargins(0, 0, 0, 0)
        inner.addLayout(bar)
        inner.addWidget(self.table, 1)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.empty)
        self.stack.addWidget(page)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.stack)

        self.census.activated.connect(self._on_census_chosen)
        self.compare.activated.connect(self._on_compare_chosen)
        self.table.activated.connect(self._on_row_activated)

    # -- public API ---------------------------------------------------------------------------

    @property
    def selected(self) -> Census | None:
        index = self.census.currentData()
        return self.taken[index] if isinstance(index, int) else None

    @property
    def compared(self) -> Census | None:
        index = self.compare.currentData()
        return self.taken[index] if isinstance(index, int) else None

    def set_profile(self, profile: Profile | None, running: bool = False) -> None:
        self.profile = profile
        self.running = running
        self.taken = []
        self._seen_events = 0
        self.census.clear()
        self.compare.clear()
        self.refresh(force=True)

    def set_running(self, running: bool) -> None:
        self.running = running
        if not self.taken:
            self._show()  # "no census yet" becomes "no censuses in this run"

    def refresh(self, force: bool = False) -> None:
        """Take in censuses that arrived since the last call; cheap when none did."""
        profile = self.profile
        if profile is None:
            self._show()
            return
        events = len(profile.events)
        arrived = any(e.type == "census" for e in islice(profile.events, self._seen_events, None))
        self._seen_events = events
        if not (arrived or force):
            return
        following = self.census.currentIndex() in (-1, self.census.count() - 1)
        self.taken = censuses(profile)
        self.census.blockSignals(True)
        chosen = self.census.currentIndex()
        self.census.clear()
        for i, census in enumerate(self.taken):
            self.census.addItem(census_label(census), i)
        # Follow the latest census unless the user chose an earlier one.
        self.census.setCurrentIndex(len(self.taken) - 1 if following else chosen)
        self.census.blockSignals(False)
        self._fill_compare()
        self._show()
        self.censusSelected.emit(self.selected, False)

    def choose(self, index: int, compare: int | None = None) -> None:
        """Show census `index` (from the first), compared with census `compare` when given, as
        the pickers do."""
        self.census.setCurrentIndex(self.census.findData(index))
        self._on_census_chosen(self.census.currentIndex())
        if compare is not None:
            self.compare.setCurrentIndex(self.compare.findData(compare))
            self._on_compare_chosen(self.compare.currentIndex())

    # -- drawing ------------------------------------------------------------------------------

    def _fill_compare(self) -> None:
        """The earlier censuses: keep the one compared with while it is still earlier."""
        keep = self.compare.currentData()
        current = self.census.currentData()
        self.compare.blockSignals(True)
        self.compare.clear()
        self.compare.addItem("none", None)
        for i, census in enumerate(self.taken[: current if isinstance(current, int) else 0]):
            self.compare.addItem(census_label(census), i)
        self.compare.setCurrentIndex(max(0, self.compare.findData(keep)) if keep is not None else 0)
        self.compare.blockSignals(False)

    def _on_census_chosen(self, _index: int) -> None:
        self._fill_compare()
        self._show()
        self.censusSelected.emit(self.selected, True)

    def _on_compare_chosen(self, _index: int) -> None:
        self._show()
        self.censusSelected.emit(self.selected, False)  # the census is in view already

    def _show(self) -> None:
        census = self.selected
        if self.profile is None or census is None:
            self.empty.setText(
                NO_RUN if self.profile is None else NO_CENSUS_YET if self.running else NO_CENSUS
            )
            self.stack.setCurrentWidget(self.empty)
            self.model.clear()
            self._mode = ""
            return
        self.stack.setCurrentIndex(1)
        earlier = self.compared
        mode = "contents" if earlier is None else "changes"
        self.model.removeRows(0, self.model.rowCount())
        if earlier is None:
            rows = contents(census)
            self._fill_contents(rows)
            total = sum(r.total for r in rows)
            summary = f"{len(rows)} holder{'s' * (len(rows) != 1)}, {format_bytes(total)}"
        else:
            found = changes(earlier, census)
            self._fill_changes(found)
            net = sum(c.bytes_delta for c in found)
            holders = f"{len(found)} holder{'s' * (len(found) != 1)}"
            summary = f"{holders} changed, {format_signed_bytes(net)} in all"
        if mode != self._mode:
            # Other columns: back to the rows' own order, widths to fit the new contents.
            self._mode = mode
            self._unsorted()
            self._fit_columns()
        else:
            # Another census in the same columns: a wider figure ("384.0 MiB" after "9 MiB")
            # widens its column rather than end in "…"; widths the user chose are kept.
            self._grow_columns()
        if is_partial(census):
            summary += f" ({partial_text(census)})"
        self.header.setText(summary)

    def _on_row_activated(self, index: QModelIndex) -> None:
        cell = self.proxy.index(index.row(), 0)
        location = cell.data(LOCATION_ROLE)
        if location:
            file, line = location
            self.locationActivated.emit(str(file), int(line))
        elif cell.data(NO_LINE_ROLE):
            self.message.emit(f"{cell.data()}: {cell.data(NO_LINE_ROLE)}")

    def _headers(self, columns: tuple[tuple[str, str], ...]) -> None:
        self.model.setColumnCount(len(columns))
        for i, (title, tip) in enumerate(columns):
            item = QStandardItem(title)
            if tip:
                item.setToolTip(tip)
            self.model.setHorizontalHeaderItem(i, item)

    def _fill_contents(self, rows: list[ContentsRow]) -> None:
        self._headers((("Holder", "What keeps the tensors alive, and where"), *ROW_COLUMNS))
        for row in rows:
            self.model.appendRow([_holder_cell(row), *_row_cells(row)])

    def _fill_changes(self, found: list[ChangeRow]) -> None:
        self._headers(
            (("Holder", "What keeps the tensors alive, and where"), *CHANGE_COLUMNS, *ROW_COLUMNS)
        )
        for change in found:
            self.model.appendRow(
                [
                    _holder_cell(change.row, change.gone),
                    _cell(format_signed_bytes(change.bytes_delta), change.bytes_delta, number=True),
                    _cell(f"{change.count_delta:+,}", change.count_delta, number=True),
                    *_row_cells(change.now),
                ]
            )

    def _unsorted(self) -> None:
        """Back to the order the rows come in (largest first, largest growth first) until the
        user clicks a column."""
        self.table.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.DescendingOrder)
        self.proxy.sort(-1)

    def _fit_columns(self) -> None:
        self.table.resizeColumnsToContents()
        self._fit_holder()

    def _grow_columns(self) -> None:
        """Each column between the holder and the shapes at least as wide as its contents
        now; the holder and the shapes share the rest again when a column grew or the
        shapes want more (their widths are _fit_holder's)."""
        shapes = self.model.columnCount() - 1
        grown = self.table.columnWidth(shapes) < self._needed_width(shapes)
        for column in range(1, shapes):
            needed = self._needed_width(column)
            if self.table.columnWidth(column) < needed:
                self.table.setColumnWidth(column, needed)
                grown = True
        if grown:
            self._fit_holder()

    def _needed_width(self, column: int) -> int:
        header = self.table.horizontalHeader()
        return max(self.table.sizeHintForColumn(column), header.sectionSizeHint(column))

    def _fit_holder(self) -> None:
        """Share the width between the holder and the shapes, the two columns of free text.
        The holder takes what its text needs first; the shapes (the last column) give way
        down to SHAPES_MIN_WIDTH. When even that leaves too little, the holder keeps
        HOLDER_MIN_WIDTH and the table scrolls sideways."""
        columns = self.model.columnCount()
        if columns < 3:
            return
        shapes = columns - 1
        between = sum(self._needed_width(i) for i in range(1, shapes))
        shapes_wanted = self._needed_width(shapes)
        shapes_least = min(shapes_wanted, SHAPES_MIN_WIDTH)
        room = self.table.viewport().width() - between
        holder = max(HOLDER_MIN_WIDTH, min(self.table.sizeHintForColumn(0), room - shapes_least))
        self.table.setColumnWidth(0, holder)
        self.table.setColumnWidth(shapes, max(shapes_least, min(shapes_wanted, room - holder)))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.table.viewport() and event.type() == QEvent.Type.Resize:
            self._fit_holder()
        return super().eventFilter(watched, event)
